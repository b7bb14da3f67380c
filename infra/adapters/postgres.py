"""The Store port on Postgres (psycopg 3, async pool). psycopg errors never leave this module."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

import orjson
import psycopg
import psycopg_pool
from psycopg import errors as pgerrors
from psycopg.rows import tuple_row

from infra.adapters import pgtrail, secret
from infra.counters import Counter, Reset
from infra.errors import CounterExists, KeyExists, LeaseLost, StoreError, StoreUnavailable
from infra.keys import Key
from infra.ledger import NOT_CONFIRMED, EdgeEnd, Link, VoidRow, subtract
from infra.ports import Audit, Claim, DeadLetter, Lease, VoidAsk
from infra.wire import ReplyError

log = logging.getLogger("numerator.batcher")

# Errors after which the same work may succeed if tried again: the connection went away, the
# server is starting or shutting down, or the transaction lost a race it can win next time.
RETRYABLE = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg_pool.PoolTimeout,
    pgerrors.SerializationFailure,
    pgerrors.DeadlockDetected,
    pgerrors.AdminShutdown,
    pgerrors.CannotConnectNow,
)

FRAME_CONNECT_S = 0.25
KEYS_CHANNEL = "numerator_keys"  # NOTIFY'd when a key is created or revoked
# Every connection's limits on waiting. A frame's transaction is a few statements sent back to
# back, committed in milliseconds (numerator_frame_commit_seconds: p99 under 25 ms here, at
# 1,024 connections on one hot counter), so a transaction idle for seconds belongs to a process
# that stopped inside it (SIGSTOP, a VM paused, a GC pause on the way to a kill): Postgres ends
# its session, and with it the counter rows it locked, so that the batcher that takes its
# shards over is not stuck behind them (a takeover takes LEASE_TTL_S plus this, at most). A
# statement that waits this long for a lock fails instead (and its frame is tried again).
IDLE_IN_TRANSACTION_S = 5.0
LOCK_TIMEOUT_S = 5.0
OPTIONS = (
    f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_S * 1000:.0f}"
    f" -c lock_timeout={LOCK_TIMEOUT_S * 1000:.0f}"
)
# A fault for the crash tests, not a setting: the first frame's transaction waits this long once
# its counter rows are locked, and says so, so that a test can freeze the batcher (SIGSTOP) there.
PAUSE_IN_FRAME_S = float(os.environ.get("NUMERATOR_PAUSE_IN_FRAME_S") or 0)
PRUNE_BATCH, PRUNE_BATCHES = 20_000, 20
COUNTER_COLUMNS = "name, start, template, reset, timezone, retention_days, confirm"
KEY_COLUMNS = "id, name, digest, scopes, created_at, last_used_at, revoked_at"
# The checkpoint, fenced by the lease's epoch: a CTE that yields a row only while the lease holds.
FENCED = (
    "fenced AS ("
    " UPDATE leases SET sequence = %(sequence)s::text,"
    " applied = GREATEST(applied, %(sequence)s::numeric)"
    " WHERE stream = %(stream)s AND shard = %(shard)s AND owner = %(owner)s"
    " AND epoch = %(epoch)s RETURNING 1)"
)
# Add each delta to its counter and period; the rows come in name order, the order they are locked
# in, so that two batchers touching the same counters cannot deadlock.
ADD = (
    "INSERT INTO counter_values AS cv (counter, period, allocated)"
    " SELECT {rows} ORDER BY 1, 2"
    " ON CONFLICT (counter, period)"
    " DO UPDATE SET allocated = cv.allocated + excluded.allocated"
    " RETURNING counter, period, allocated"
)


# A period's row is not added to when it says fewer values were handed out than the audit trail
# holds (its floor, as a count): moved back by hand, it would hand them out again.
FLOOR_HOLDS = (
    "coalesce((SELECT b.allocated FROM counter_values b"
    " WHERE b.counter = {0} AND b.period = {1}), 0) >= {2}"
)


# A frame's audit rows, from a CTE `rows` (klass, keep_s, ranges, detail, names): each the next
# link of its chain, stream/shard/class, written only while the lease holds (`fenced`).
AUDIT = (
    " t AS (SELECT now() AS at),"
    " linked AS (SELECT rows.*, t.at, t.at + make_interval(secs => rows.keep_s) AS keep,"
    "  coalesce((SELECT f.hash FROM allocation_frames f"
    "   WHERE f.chain = %(chain)s || rows.klass ORDER BY f.id DESC LIMIT 1),"
    # a chain retention pruned to nothing goes on from its last pruned row
    "   (SELECT s.after_hash FROM chain_starts s WHERE s.chain = %(chain)s || rows.klass),"
    "   '\\x'::bytea) AS prev"
    "  FROM rows, t),"
    " audit AS (INSERT INTO allocation_frames (stream, shard, sequence, chain, ranges, detail,"
    "  counters, committed_at, keep_until, prev, hash)"
    "  SELECT %(stream)s, %(shard)s, %(sequence)s::text, %(chain)s || klass, ranges, detail,"
    "  names, at, keep, prev,"
    "  sha256(prev || ledger_content(%(stream)s, %(shard)s, %(sequence)s::text, ranges, detail,"
    "  at, keep))"
    "  FROM linked WHERE EXISTS (SELECT FROM fenced) RETURNING 1)"
)


def chained(lease: Lease, sequence: str, audits: Sequence[Audit]) -> dict[str, Any]:
    """FENCED's and AUDIT's parameters: `audits` as [klass, keep_s, ranges, detail, names]."""
    return {
        **fence(lease, sequence),
        "chain": f"{lease.stream}/{lease.shard}/",
        "audits": rows([a.klass, a.keep_s, a.ranges, a.detail, named(a)] for a in audits),
    }


def named(audit: Audit) -> list[str]:
    """The counters an audit row names (its `counters` column, for finding a counter's rows):
    those its ranges hold, and those its voids and confirmations name. As the SQL function
    ledger_counters works it out, which `audit verify` holds the column to; here, so that a
    frame's statement does not parse its detail again."""
    names = {r[0] for r in audit.ranges}
    names.update(v[0] for v in audit.detail.get("v") or ())
    names.update(c[0] for c in audit.detail.get("c") or ())
    return sorted(names)


def _counter(row: tuple[Any, ...]) -> Counter:
    name, start, template, reset, timezone, retention, confirm = row
    return Counter(name, start, template, Reset(reset), timezone, retention, confirm)


def _key(row: tuple[Any, ...]) -> Key:
    key_id, name, digest, scopes, created, last_used, revoked = row
    return Key(key_id, name, bytes(digest), tuple(scopes), created, last_used, revoked)


def fence(lease: Lease, sequence: str) -> dict[str, Any]:
    """FENCED's parameters."""
    return {
        "sequence": sequence,
        "stream": lease.stream,
        "shard": lease.shard,
        "owner": lease.owner,
        "epoch": lease.epoch,
    }


def lost(lease: Lease) -> LeaseLost:
    return LeaseLost(f"shard {lease.shard} has a newer owner than epoch {lease.epoch}")


def rows(items: Iterable[Sequence[Any]]) -> str:
    """Many rows as ONE parameter, a JSON array of arrays that the statement unpacks with
    json_array_elements. psycopg dumps a Python list as an array element by element, in Python:
    three lists of 370 took 2.3 ms here, against microseconds for orjson — and a frame over many
    counters passes several such lists."""
    return orjson.dumps(list(items)).decode()


def migrations() -> list[tuple[int, str]]:
    """The versioned SQL migrations shipped with the package, in order."""
    folder = resources.files("infra") / "migrations"
    found = []
    for item in folder.iterdir():
        if item.name.endswith(".sql"):
            found.append((int(item.name.split("_", 1)[0]), item.read_text()))
    return sorted(found)


async def migrate(url: str) -> list[int]:
    """Apply the migrations not yet applied; safe to run from several processes at once."""
    try:
        connect = psycopg.AsyncConnection.connect(url, connect_timeout=10)
        async with await connect as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(724_1001)")
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT version FROM schema_migrations")
            done = {row[0] for row in await cur.fetchall()}
            applied = []
            for version, sql in migrations():
                if version in done:
                    continue
                await conn.execute(sql.encode())
                await conn.execute(
                    "INSERT INTO schema_migrations (version) VALUES (%s)", (version,)
                )
                applied.append(version)
            return applied
    except RETRYABLE as exc:
        raise StoreUnavailable(f"cannot reach Postgres to migrate: {exc}") from exc


class PostgresFrame:
    """One frame's transaction on one connection (see FrameTransaction in ports)."""

    def __init__(self, conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
        self.conn = conn

    async def claims(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Claim]:
        # First reserve every key that has no live answer, with a placeholder row this
        # transaction will fill in (`remember`). A concurrent frame holding the same key — another
        # worker's batcher — makes this insert wait until that frame ends; once it commits, its
        # answer is read below and shared, instead of a second allocation overwriting it. Keys go
        # in sorted order, so two frames never wait on each other in a cycle.
        wanted = rows(sorted(keys))
        cur = await self.conn.execute(
            "INSERT INTO idempotency_keys AS i"
            " (counter, key, count, first, last, day, expires_at)"
            " SELECT k->>0, k->>1, 0, 0, 0, current_date, now()"
            " FROM json_array_elements(%s::json) AS k"
            " ON CONFLICT (counter, key) DO UPDATE SET expires_at = now()"
            " WHERE i.expires_at <= now()"  # an expired answer is reserved anew
            " RETURNING counter, key",
            (wanted,),
        )
        reserved = {(row[0], row[1]) for row in await cur.fetchall()}
        if len(reserved) == len(keys):
            return {}
        cur = await self.conn.execute(
            "SELECT i.counter, i.key, i.count, i.first, i.last, i.day, i.holder, i.held_since"
            " FROM idempotency_keys i"
            " JOIN json_array_elements(%s::json) AS k ON i.counter = k->>0 AND i.key = k->>1"
            " WHERE i.expires_at > now()",
            (rows(k for k in keys if k not in reserved),),
        )
        return {(row[0], row[1]): Claim(*row) for row in await cur.fetchall()}

    async def allocate(
        self, deltas: dict[tuple[str, str], int], floors: Mapping[tuple[str, str], int]
    ) -> dict[tuple[str, str], int]:
        # One statement for every counter of the frame.
        keys = sorted(deltas)
        held = FLOOR_HOLDS.format("d->>0", "d->>1", "(d->>3)::bigint")
        cur = await self.conn.execute(
            ADD.format(
                rows="d->>0, d->>1, (d->>2)::bigint FROM json_array_elements(%s::json) d"
                f" WHERE {held}"
            ),
            (rows((c, p, deltas[(c, p)], floors.get((c, p), 0)) for c, p in keys),),
        )
        totals = {(row[0], row[1]): row[2] for row in await cur.fetchall()}
        global PAUSE_IN_FRAME_S
        if PAUSE_IN_FRAME_S:
            pause, PAUSE_IN_FRAME_S = PAUSE_IN_FRAME_S, 0.0  # the first frame only
            log.warning("pausing %gs inside the frame's transaction", pause)
            await asyncio.sleep(pause)
        return totals

    async def remember(self, claims: Sequence[Claim], retention: float) -> None:
        if not claims:
            return
        await self.conn.execute(
            "INSERT INTO idempotency_keys"
            " (counter, key, count, first, last, day, holder, held_since, expires_at)"
            " SELECT c->>0, c->>1, (c->>2)::int, (c->>3)::bigint, (c->>4)::bigint,"
            " (c->>5)::date, c->>6, (c->>7)::float8, now() + make_interval(secs => %s)"
            " FROM json_array_elements(%s::json) AS c"
            " ON CONFLICT (counter, key) DO UPDATE SET count = excluded.count,"
            " first = excluded.first, last = excluded.last, day = excluded.day,"
            " holder = excluded.holder, held_since = excluded.held_since,"
            " expires_at = excluded.expires_at",
            (
                retention,
                rows(
                    (c.counter, c.key, c.count, c.first, c.last, c.day, c.holder, c.held_since)
                    for c in claims
                ),
            ),
        )

    async def hand_over(self, holders: Sequence[tuple[str, str, str, float]]) -> None:
        if not holders:
            return
        await self.conn.execute(
            "UPDATE idempotency_keys i SET holder = h->>2, held_since = (h->>3)::float8"
            " FROM json_array_elements(%s::json) AS h"
            " WHERE i.counter = h->>0 AND i.key = h->>1 AND i.held_since <= (h->>3)::float8",
            (rows(holders),),
        )

    async def free(self, holders: Sequence[tuple[str, str, str]]) -> list[Claim]:
        if not holders:
            return []
        cur = await self.conn.execute(
            "DELETE FROM idempotency_keys i USING json_array_elements(%s::json) AS h"
            " WHERE i.counter = h->>0 AND i.key = h->>1 AND i.holder = h->>2"
            " AND i.expires_at > now()"
            " RETURNING i.counter, i.key, i.count, i.first, i.last, i.day, i.holder,"
            " i.held_since",
            (rows(holders),),
        )
        return [Claim(*row) for row in await cur.fetchall()]

    async def dead_letter(self, letters: Sequence[DeadLetter]) -> None:
        if not letters:
            return
        async with self.conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO dead_letters (stream, shard, sequence, problem, raw)"
                " VALUES (%s, %s, %s, %s, %s)",
                [(x.stream, x.shard, x.sequence, x.problem, x.raw) for x in letters],
            )

    async def void(self, asks: Sequence[VoidAsk]) -> list[tuple[ReplyError, str] | bool]:
        results: list[tuple[ReplyError, str] | bool] = []
        for ask in asks:
            refused = await self._issued(ask)
            if refused is not None:
                results.append(refused)
                continue
            overlap = await self._overlap("voids", ask)
            if overlap == [(ask.first, ask.last, ask.reason)]:
                results.append(False)
                continue
            if overlap:
                first, last, reason = overlap[0]
                why = f"values {first} to {last} are void already, for {reason!r}"
                results.append((ReplyError.ALREADY_VOID, why))
                continue
            if ask.reason == NOT_CONFIRMED and await self._overlap("confirmations", ask):
                why = "some of these values were confirmed since: the sweep tries again"
                results.append((ReplyError.ALREADY_VOID, why))
                continue
            await self.conn.execute(
                "INSERT INTO voids (counter, period, first, last, reason, who, keep_until)"
                " VALUES (%s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s))",
                (ask.counter, ask.period, ask.first, ask.last, ask.reason, ask.who, ask.keep_s),
            )
            results.append(True)
        return results

    async def _issued(self, ask: VoidAsk) -> tuple[ReplyError, str] | None:
        """Whether the ask's values were handed out (its period's row locked meanwhile: a void
        or confirmation and an allocation of the same counter wait for each other)."""
        cur = await self.conn.execute(
            "SELECT allocated FROM counter_values WHERE counter = %s AND period = %s FOR UPDATE",
            (ask.counter, ask.period),
        )
        found = await cur.fetchone()
        issued = ask.start - 1 + (int(found[0]) if found else 0)
        if ask.first >= ask.start and ask.last <= issued:
            return None
        shown = f"the last is {issued}" if issued >= ask.start else "none yet"
        return (
            ReplyError.NOT_ISSUED,
            f"values {ask.first} to {ask.last} of period {ask.period!r} were not all handed "
            f"out ({shown}, from {ask.start})",
        )

    async def _overlap(self, table: str, ask: VoidAsk) -> list[tuple[Any, ...]]:
        cur = await self.conn.execute(
            f"SELECT first, last{', reason' if table == 'voids' else ''} FROM {table}"
            " WHERE counter = %s AND period = %s AND first <= %s AND last >= %s ORDER BY first",
            (ask.counter, ask.period, ask.last, ask.first),
        )
        return await cur.fetchall()

    async def confirm(self, asks: Sequence[VoidAsk]) -> list[tuple[ReplyError, str] | bool]:
        results: list[tuple[ReplyError, str] | bool] = []
        for ask in asks:
            refused = await self._issued(ask)
            if refused is None:
                void = await self._overlap("voids", ask)
                if void:
                    first, last, reason = void[0]
                    why = f"values {first} to {last} are void, for {reason!r}"
                    refused = (ReplyError.ALREADY_VOID, why)
            if refused is not None:
                results.append(refused)
                continue
            cur = await self.conn.execute(
                "INSERT INTO confirmations (counter, period, first, last, who, keep_until)"
                " VALUES (%s, %s, %s, %s, %s, now() + make_interval(secs => %s))"
                " ON CONFLICT DO NOTHING RETURNING 1",
                (ask.counter, ask.period, ask.first, ask.last, ask.who, ask.keep_s),
            )
            results.append(bool(await cur.fetchall()))
        return results

    async def checkpoint(self, lease: Lease, sequence: str, audits: Sequence[Audit]) -> None:
        # The fence, the checkpoint and the frame's audit rows in one statement: one round trip.
        cur = await self.conn.execute(
            f"WITH {FENCED},"
            " rows AS (SELECT x->>0 AS klass, (x->>1)::float8 AS keep_s, x->2 AS ranges,"
            "  x->3 AS detail, ARRAY(SELECT json_array_elements_text(x->4)) AS names"
            "  FROM json_array_elements(%(audits)s::json) AS x)," + AUDIT + " SELECT 1 FROM fenced",
            chained(lease, sequence, audits),
        )
        if not await cur.fetchall():
            raise lost(lease)

    async def hold(self, lease: Lease, first: str, last: str, replies: bytes) -> int:
        cur = await self.conn.execute(
            "INSERT INTO frame_replies (stream, shard, first_sequence, last_sequence, replies)"
            " VALUES (%s, %s, %s::numeric, %s::numeric, %s) RETURNING id",
            (lease.stream, lease.shard, first, last, replies),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    async def published(self, held: Sequence[int]) -> None:
        if held:
            await self.conn.execute(
                "UPDATE frame_replies SET published = true WHERE id = ANY(%s)", (list(held),)
            )


class PostgresStore:
    """Counter definitions and state in Postgres, through a small connection pool, opened by
    `open()` or else on first use."""

    def __init__(self, url: str, max_size: int = 4, timeout: float = 2.0, secret: str = "") -> None:
        """`secret`: a Secrets Manager secret to read the URL from on first use, when `url` is
        empty (DATABASE_SECRET_ARN, in Lambda)."""
        self.url, self.secret = url, secret
        self.max_size, self.timeout = max_size, timeout
        self._opened = False
        self.pool = self._pool()

    def _pool(self) -> psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]:
        return psycopg_pool.AsyncConnectionPool(
            self.url,
            min_size=1,
            max_size=self.max_size,
            timeout=self.timeout,
            open=False,
            # No check on checkout (a round trip per frame): a connection broken by a
            # Postgres restart fails one try, is discarded by the pool, and the retry gets
            # a fresh one.
            kwargs={
                "autocommit": True,
                "connect_timeout": 2,
                "row_factory": tuple_row,
                "options": OPTIONS,
            },
            # A background reconnect gives up at once; the pool connects again on demand, so
            # a request waits at most `timeout`, never behind a long reconnect backoff.
            reconnect_timeout=0,
        )

    async def open(self) -> None:
        self._opened = True
        await self.pool.open(wait=False)

    async def close(self) -> None:
        await self.pool.close()

    @asynccontextmanager
    async def _connection(
        self, timeout: float | None = None
    ) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
        if not self.url and self.secret:
            url = await secret.resolve(self.url, self.secret)
            # Calls that came together each read the secret: the first to come back makes the
            # pool. A second pool replacing it after it was opened was never opened itself, and
            # every call of the container failed on it ('pool is not open yet': sam local).
            if not self.url:
                self.url = url
                self.pool = self._pool()
        if not self.url:
            raise StoreUnavailable("no Postgres is configured here: set DATABASE_URL")
        if not self._opened:  # opened on first use where nothing opened it (a Lambda container)
            await self.open()
        try:
            async with self.pool.connection(timeout) as conn:
                yield conn
        except RETRYABLE as exc:
            raise StoreUnavailable(f"Postgres is unavailable: {exc}") from exc
        except pgerrors.UniqueViolation:
            raise
        except psycopg.Error as exc:
            raise StoreError(f"Postgres refused: {exc}") from exc

    async def _fetch(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        async with self._connection() as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall()

    async def create(self, counter: Counter) -> None:
        try:
            async with self._connection() as conn:
                await conn.execute(
                    f"INSERT INTO counters ({COUNTER_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (
                        counter.name,
                        counter.start,
                        counter.template,
                        counter.reset.value,
                        counter.timezone,
                        counter.retention_days,
                        counter.confirm,
                    ),
                )
        except pgerrors.UniqueViolation as exc:
            raise CounterExists(counter.name) from exc

    async def get(self, name: str) -> Counter | None:
        rows = await self._fetch(f"SELECT {COUNTER_COLUMNS} FROM counters WHERE name = %s", (name,))
        return _counter(rows[0]) if rows else None

    async def get_many(self, names: Sequence[str]) -> dict[str, Counter]:
        rows = await self._fetch(
            f"SELECT {COUNTER_COLUMNS} FROM counters WHERE name = ANY(%s)", (list(names),)
        )
        return {row[0]: _counter(row) for row in rows}

    async def page(self, after: str | None, limit: int) -> list[Counter]:
        rows = await self._fetch(
            f"SELECT {COUNTER_COLUMNS} FROM counters WHERE name > %s ORDER BY name LIMIT %s",
            (after or "", limit),
        )
        return [_counter(row) for row in rows]

    async def allocated(self, name: str, period: str) -> int:
        rows = await self._fetch(
            "SELECT allocated FROM counter_values WHERE counter = %s AND period = %s",
            (name, period),
        )
        return int(rows[0][0]) if rows else 0

    async def acquire(self, stream: str, shard: str, owner: str, ttl: float) -> Lease | None:
        rows = await self._fetch(
            "INSERT INTO leases AS l (stream, shard, owner, epoch, sequence, expires_at)"
            " VALUES (%s, %s, %s, 1, NULL, now() + make_interval(secs => %s))"
            " ON CONFLICT (stream, shard) DO UPDATE"
            " SET owner = excluded.owner, expires_at = excluded.expires_at,"
            "     epoch = CASE WHEN l.owner = excluded.owner THEN l.epoch ELSE l.epoch + 1 END"
            " WHERE l.owner = excluded.owner OR l.expires_at < now()"
            " RETURNING epoch, sequence, applied",
            (stream, shard, owner, ttl),
        )
        if not rows:
            return None
        epoch, sequence, applied = rows[0]
        return Lease(
            stream, shard, owner, epoch, sequence, None if applied is None else int(applied)
        )

    async def members(self, stream: str, owner: str, ttl: float) -> list[str]:
        rows = await self._fetch(
            "WITH seen AS (INSERT INTO batchers (stream, owner) VALUES (%(stream)s, %(owner)s)"
            "  ON CONFLICT (stream, owner) DO UPDATE SET seen_at = now()"
            "  RETURNING owner, joined_at),"
            " gone AS (DELETE FROM batchers WHERE stream = %(stream)s"
            "  AND seen_at < now() - make_interval(secs => %(ttl)s * 10))"
            " SELECT owner, joined_at FROM seen UNION ALL"
            " SELECT owner, joined_at FROM batchers WHERE stream = %(stream)s"
            "  AND owner <> %(owner)s AND seen_at >= now() - make_interval(secs => %(ttl)s)"
            " ORDER BY joined_at, owner",
            {"stream": stream, "owner": owner, "ttl": ttl},
        )
        return [str(row[0]) for row in rows]

    async def alive(self, stream: str, owner: str) -> None:
        await self._fetch(
            "INSERT INTO batchers (stream, owner) VALUES (%s, %s)"
            " ON CONFLICT (stream, owner) DO UPDATE SET seen_at = now() RETURNING 1",
            (stream, owner),
        )

    async def alive_batchers(self, stream: str, within: float) -> int:
        rows = await self._fetch(
            "SELECT count(*) FROM batchers WHERE stream = %s"
            " AND seen_at >= now() - make_interval(secs => %s)",
            (stream, within),
        )
        return int(rows[0][0])

    async def edge_seen(self, edge: str, settled: float, ended: bool = False) -> None:
        # As an age on Postgres's clock, which dates the values issued: the edge's own clock may
        # be off by more than the moment's whole margin. Measured once a connection is in hand,
        # so that a wait for one does not move the moment later.
        async with self._connection() as conn:
            await conn.execute(
                "INSERT INTO edges (id, settled_at)"
                " VALUES (%s, now() - make_interval(secs => %s))"
                " ON CONFLICT (id) DO UPDATE SET seen_at = now(),"
                " settled_at = excluded.settled_at, ended_at = CASE WHEN %s THEN now() END",
                (edge, max(0.0, time.time() - settled), ended),
            )

    async def dead_edges(self, edges: Collection[str], silent: float) -> dict[str, EdgeEnd]:
        if not edges:
            return {}
        async with self._connection() as conn:
            return await pgtrail.dead_edges(conn, edges, silent)

    async def leave(self, stream: str, owner: str) -> None:
        await self._fetch(
            "DELETE FROM batchers WHERE stream = %s AND owner = %s RETURNING 1", (stream, owner)
        )

    async def release(self, lease: Lease, forget: bool) -> None:
        where = " WHERE stream = %s AND shard = %s AND owner = %s AND epoch = %s"
        params = (lease.stream, lease.shard, lease.owner, lease.epoch)
        if forget:
            await self._fetch("DELETE FROM leases" + where + " RETURNING 1", params)
        else:
            await self._fetch(
                "UPDATE leases SET expires_at = now()" + where + " RETURNING 1", params
            )

    @asynccontextmanager
    async def frame(self) -> AsyncIterator[PostgresFrame]:
        # A short wait for a connection: a frame that cannot start soon is better retried (and its
        # late records answered 503) than left holding its clients until they time out.
        async with self._connection(FRAME_CONNECT_S) as conn, conn.transaction():
            yield PostgresFrame(conn)

    async def allocate_plain(
        self,
        lease: Lease,
        sequence: str,
        demand: Sequence[tuple[str, str, int, int, str, int]],
        audits: Sequence[Audit],
    ) -> dict[tuple[str, str], int]:
        # ONE statement, so one round trip and its own transaction: the fence first; the
        # allocation only if it holds, in name order (no deadlock between batchers); the audit
        # rows from what the allocation returned: [counter, period, first, last] per row,
        # grouped by the counters' retention class.
        async with self._connection(FRAME_CONNECT_S) as conn:
            cur = await conn.execute(
                f"WITH {FENCED},"
                " d AS (SELECT x->>0 AS counter, x->>1 AS period, (x->>2)::bigint AS delta,"
                " (x->>3)::bigint AS start, x->>4 AS klass, (x->>5)::bigint AS floor"
                " FROM json_array_elements(%(demand)s::json) AS x),"
                " alloc AS ("
                + ADD.format(
                    rows="counter, period, delta FROM d WHERE EXISTS (SELECT FROM fenced) AND "
                    + FLOOR_HOLDS.format("d.counter", "d.period", "d.floor")
                )
                + "), k AS (SELECT x->>0 AS klass, (x->>1)::float8 AS keep_s, x->3 AS detail"
                " FROM json_array_elements(%(audits)s::json) AS x),"
                " made AS (SELECT d.klass, json_agg(json_build_array(a.counter, a.period,"
                " d.start + a.allocated - d.delta, d.start - 1 + a.allocated)"
                " ORDER BY a.counter, a.period) AS ranges,"
                " array_agg(DISTINCT a.counter) AS names"
                " FROM alloc a JOIN d ON d.counter = a.counter AND d.period = a.period"
                " GROUP BY d.klass),"
                " rows AS (SELECT made.klass, k.keep_s, made.ranges, k.detail, made.names"
                " FROM made JOIN k ON k.klass = made.klass),"
                + AUDIT
                + " SELECT counter, period, allocated FROM alloc"
                " UNION ALL SELECT NULL, NULL, NULL FROM fenced",
                {**chained(lease, sequence, audits), "demand": rows(demand)},
            )
            found = await cur.fetchall()
        if not any(row[0] is None for row in found):
            raise lost(lease)
        return {(row[0], row[1]): row[2] for row in found if row[0] is not None}

    async def committed(
        self, lease: Lease, sequence: str
    ) -> list[tuple[str, str, int, int]] | None:
        # Committed by this lease: its checkpoint is there under its own epoch (a new owner
        # may have committed a frame ending at the same sequence after taking the shard over).
        rows = await self._fetch(
            "SELECT f.ranges FROM leases l JOIN allocation_frames f ON f.stream = l.stream"
            " AND f.shard = l.shard AND f.sequence = l.sequence"
            " WHERE l.stream = %s AND l.shard = %s AND l.owner = %s AND l.epoch = %s"
            " AND l.sequence = %s",
            (lease.stream, lease.shard, lease.owner, lease.epoch, sequence),
        )
        if not rows:
            return None
        return [(c, p, int(f), int(t)) for found in rows for c, p, f, t in found[0]]

    async def unpublished(self, stream: str, shard: str) -> list[tuple[int, bytes]]:
        rows = await self._fetch(
            "SELECT id, replies FROM frame_replies"
            " WHERE stream = %s AND shard = %s AND NOT published ORDER BY id",
            (stream, shard),
        )
        return [(int(row[0]), bytes(row[1])) for row in rows]

    async def published(self, held: Sequence[int]) -> None:
        if held:
            await self._fetch(
                "UPDATE frame_replies SET published = true WHERE id = ANY(%s) RETURNING 1",
                (list(held),),
            )

    async def replayed(self, stream: str, shard: str, first: str, last: str) -> list[bytes]:
        rows = await self._fetch(
            "SELECT replies FROM frame_replies WHERE stream = %s AND shard = %s"
            " AND last_sequence >= %s::numeric AND first_sequence <= %s::numeric ORDER BY id",
            (stream, shard, first, last),
        )
        return [bytes(row[0]) for row in rows]

    async def held_since(self, stream: str, shard: str, seconds: float) -> list[bytes]:
        rows = await self._fetch(
            "SELECT replies FROM frame_replies WHERE stream = %s AND shard = %s"
            " AND committed_at > now() - make_interval(secs => %s) ORDER BY id DESC",
            (stream, shard, seconds),
        )
        return [bytes(row[0]) for row in rows]

    async def end(self, lease: Lease) -> None:
        rows = await self._fetch(
            "UPDATE leases SET ended = true"
            " WHERE stream = %s AND shard = %s AND owner = %s AND epoch = %s RETURNING 1",
            (lease.stream, lease.shard, lease.owner, lease.epoch),
        )
        if not rows:
            raise lost(lease)

    async def ended(self, stream: str, shard: str) -> bool:
        rows = await self._fetch(
            "SELECT ended FROM leases WHERE stream = %s AND shard = %s", (stream, shard)
        )
        return bool(rows and rows[0][0])

    async def prune(self, now: datetime, audit_retention: float, reply_retention: float) -> int:
        # In batches, so that no single statement holds locks or bloats WAL for long.
        cutoff = now - timedelta(seconds=audit_retention)
        statements = [
            ("idempotency_keys", "ctid", "expires_at < %s", now),
            ("voids", "ctid", "keep_until < %s", now),
            ("dead_letters", "id", "created_at < %s", cutoff),
            ("frame_replies", "id", "committed_at < %s", now - timedelta(seconds=reply_retention)),
        ]
        total = 0
        for _ in range(PRUNE_BATCHES):
            # The audit trail's oldest rows, noting how far each counter's period was pruned.
            found = await self._fetch(
                "WITH gone AS (DELETE FROM allocation_frames WHERE id IN"
                " (SELECT id FROM allocation_frames WHERE keep_until < %s"
                f" ORDER BY id LIMIT {PRUNE_BATCH}) RETURNING chain, id, hash, ranges),"
                " marks AS (INSERT INTO pruned (counter, period, upto)"
                " SELECT r->>0, r->>1, max((r->>3)::bigint)"
                " FROM gone, json_array_elements(gone.ranges) AS r GROUP BY 1, 2"
                " ON CONFLICT (counter, period) DO UPDATE"
                " SET upto = greatest(pruned.upto, excluded.upto)),"
                # where each chain now starts: the first kept row follows the last pruned one
                " starts AS (INSERT INTO chain_starts (chain, after_id, after_hash)"
                " SELECT DISTINCT ON (chain) chain, id, hash FROM gone ORDER BY chain, id DESC"
                " ON CONFLICT (chain) DO UPDATE SET after_id = excluded.after_id,"
                " after_hash = excluded.after_hash, pruned_at = now()"
                " WHERE chain_starts.after_id < excluded.after_id)"
                " SELECT count(*) FROM gone",
                (now,),
            )
            total += int(found[0][0])
            if int(found[0][0]) < PRUNE_BATCH:
                break
        for table, key, condition, bound in statements:
            params = (bound,)
            for _ in range(PRUNE_BATCHES):
                rows = await self._fetch(
                    f"WITH gone AS (DELETE FROM {table} WHERE {key} IN"
                    f" (SELECT {key} FROM {table} WHERE {condition} LIMIT {PRUNE_BATCH})"
                    " RETURNING 1) SELECT count(*) FROM gone",
                    params,
                )
                total += int(rows[0][0])
                if int(rows[0][0]) < PRUNE_BATCH:
                    break
        return total

    async def set_retention(self, name: str, days: int | None) -> Counter | None:
        rows = await self._fetch(
            f"UPDATE counters SET retention_days = %s WHERE name = %s RETURNING {COUNTER_COLUMNS}",
            (days, name),
        )
        return _counter(rows[0]) if rows else None

    async def highest(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        # The counter's newest rows hold its period's highest value (ranges rise in commit
        # order); a period no recent row holds has no floor, and is not refused.
        found = await self._fetch(
            "SELECT p->>0, p->>1, (SELECT max((r->>3)::bigint) FROM (SELECT f.ranges"
            "  FROM allocation_frames f WHERE f.counters @> ARRAY[p->>0]"
            "  ORDER BY f.id DESC LIMIT 20) AS f, json_array_elements(f.ranges) AS r"
            "  WHERE r->>0 = p->>0 AND r->>1 = p->>1)"
            " FROM json_array_elements(%s::json) AS p",
            (rows(pairs),),
        )
        return {(c, p): int(top) for c, p, top in found if top is not None}

    async def trail(self, name: str) -> tuple[list[Link], dict[str, int]]:
        rows = await self._fetch(
            "SELECT id, committed_at, chain, ranges::text, detail::text, hash, prev"
            " FROM allocation_frames WHERE counters @> ARRAY[%s] ORDER BY id",
            (name,),
        )
        links = [
            Link(
                id,
                at,
                chain,
                orjson.loads(ranges),
                orjson.loads(detail) if detail else None,
                bytes(hash).hex() if hash else "",
                bytes(prev).hex() if prev else "",
            )
            for id, at, chain, ranges, detail, hash, prev in rows
        ]
        pruned = await self._fetch("SELECT period, upto FROM pruned WHERE counter = %s", (name,))
        return links, {period: int(upto) for period, upto in pruned}

    async def confirmed(self, name: str, period: str) -> list[tuple[int, int]]:
        rows = await self._fetch(
            "SELECT first, last FROM confirmations WHERE counter = %s AND period = %s",
            (name, period),
        )
        return [(int(a), int(b)) for a, b in rows]

    async def confirming(self) -> list[Counter]:
        rows = await self._fetch(f"SELECT {COUNTER_COLUMNS} FROM counters WHERE confirm", ())
        return [_counter(row) for row in rows]

    async def unconfirmed(
        self, counter: Counter, ttl: float
    ) -> tuple[list[tuple[str, int, int]], datetime]:
        """The values of `counter` handed out more than `ttl` seconds ago, since the last sweep,
        that are neither confirmed nor void, as (period, first, last); and up to when."""
        rows = await self._fetch(
            "SELECT now() - make_interval(secs => %(ttl)s),"
            " coalesce((SELECT upto FROM confirm_swept WHERE counter = %(name)s), 'epoch')",
            {"ttl": ttl, "name": counter.name},
        )
        cutoff, since = rows[0]
        frames = await self._fetch(
            "SELECT ranges::text FROM allocation_frames WHERE counters @> ARRAY[%s]"
            " AND committed_at > %s AND committed_at <= %s ORDER BY id",
            (counter.name, since, cutoff),
        )
        issued: dict[str, list[tuple[int, int]]] = {}
        for (text,) in frames:
            for name, period, first, last in orjson.loads(text):
                if name == counter.name:
                    issued.setdefault(period, []).append((first, last))
        out: list[tuple[str, int, int]] = []
        for period, spans in issued.items():
            low, high = min(f for f, _ in spans), max(last for _, last in spans)
            taken = await self._fetch(
                "SELECT first, last FROM confirmations WHERE counter = %(c)s AND period = %(p)s"
                " AND first <= %(high)s AND last >= %(low)s UNION ALL"
                " SELECT first, last FROM voids WHERE counter = %(c)s AND period = %(p)s"
                " AND first <= %(high)s AND last >= %(low)s",
                {"c": counter.name, "p": period, "low": low, "high": high},
            )
            out += [(period, a, b) for a, b in subtract(spans, taken)]
        return out, cutoff

    async def swept(self, name: str, upto: datetime) -> None:
        await self._fetch(
            "INSERT INTO confirm_swept (counter, upto) VALUES (%s, %s) ON CONFLICT (counter)"
            " DO UPDATE SET upto = greatest(confirm_swept.upto, excluded.upto) RETURNING 1",
            (name, upto),
        )

    async def trail_size(self) -> int:
        """Bytes the audit trail takes on disk, its indexes included."""
        rows = await self._fetch("SELECT pg_total_relation_size('allocation_frames')", ())
        return int(rows[0][0])

    async def voids(self, name: str, period: str) -> list[VoidRow]:
        rows = await self._fetch(
            "SELECT counter, period, first, last, reason, who, at FROM voids"
            " WHERE counter = %s AND period = %s ORDER BY first",
            (name, period),
        )
        return [VoidRow(*row) for row in rows]

    async def verify(
        self, name: str | None, anchors: Mapping[str, Mapping[str, Any]] | None = None
    ) -> dict[str, Any]:
        async with self._connection() as conn:
            return await pgtrail.verify(conn, name, anchors)

    async def heads(self) -> dict[str, dict[str, Any]]:
        async with self._connection() as conn:
            return await pgtrail.heads(conn)

    async def mark_edges(self, stream: str, silent: float, keep_s: float) -> int:
        async with self._connection() as conn:
            return await pgtrail.mark_edges(conn, stream, silent, keep_s)

    async def add_key(self, key: Key) -> Key:
        try:
            rows = await self._told(
                "INSERT INTO api_keys (id, name, digest, scopes) VALUES (%s, %s, %s, %s)"
                f" RETURNING {KEY_COLUMNS}",
                (key.id, key.name, key.digest, list(key.scopes)),
            )
        except pgerrors.UniqueViolation as exc:
            raise KeyExists(key.name) from exc
        return _key(rows[0])

    async def keys(self) -> list[Key]:
        rows = await self._fetch(
            f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY name, created_at", ()
        )
        return [_key(row) for row in rows]

    async def key(self, key_id: str) -> Key | None:
        rows = await self._fetch(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE id = %s", (key_id,))
        return _key(rows[0]) if rows else None

    async def revoke_key(self, name: str) -> Key | None:
        rows = await self._told(
            "UPDATE api_keys SET revoked_at = now() WHERE name = %s AND revoked_at IS NULL"
            f" RETURNING {KEY_COLUMNS}",
            (name,),
        )
        return _key(rows[0]) if rows else None

    async def _told(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """A change to the keys, and a notice of it on KEYS_CHANNEL in the same transaction:
        every edge that follows `key_changes` reloads its copy as it commits."""
        async with self._connection() as conn, conn.transaction():
            cur = await conn.execute(sql, params)
            found = await cur.fetchall()
            if found:
                await conn.execute(f"NOTIFY {KEYS_CHANNEL}")
            return found

    async def key_changes(self) -> AsyncIterator[None]:
        """Once listening, and again whenever a key is created or revoked through any
        numerator (NOTIFY on KEYS_CHANNEL), on a connection of its own; StoreUnavailable when
        that connection cannot be made or is lost."""
        if not self.url:
            raise StoreUnavailable("no Postgres URL to listen on for key changes")
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=2
            )
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot listen for key changes: {exc}") from exc
        async with conn:
            try:
                await conn.execute(f"LISTEN {KEYS_CHANNEL}")
                yield  # listening: whatever changed before is in the next reload
                async for _ in conn.notifies():
                    yield
            except psycopg.Error as exc:
                raise StoreUnavailable(f"lost the connection for key changes: {exc}") from exc

    async def touch_keys(self, used: Mapping[str, datetime]) -> None:
        if used:
            await self._fetch(
                "UPDATE api_keys k SET last_used_at = greatest(k.last_used_at, u.at)"
                " FROM unnest(%s::text[], %s::timestamptz[]) AS u(id, at)"
                " WHERE k.id = u.id RETURNING 1",
                (list(used), list(used.values())),
            )

    async def ping(self) -> None:
        await self._fetch("SELECT 1", ())
