"""The Frames role: a frame's one transaction, plain frames in one statement, the replies a
durable stream holds until published, and the pruning of what retention lets go."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from psycopg import sql

from infra.adapters.postgres import statements
from infra.adapters.postgres.frame import PostgresFrame
from infra.adapters.postgres.pool import Pool, objects
from infra.adapters.postgres.statements import chained, lost
from infra.faults import Faults
from infra.ports import Audit, Claim, HeldReplies, Holder, Lease, PlainDemand, Pruned
from infra.spans import Span
from infra.trail import Start

FRAME_CONNECT_S = 0.25


def plain_parameters(
    lease: Lease, sequence: str, demand: Sequence[PlainDemand], audits: Sequence[Audit]
) -> dict[str, Any]:
    """PLAIN's parameters (frame.sql: `plain`)."""
    return {**chained(lease, sequence, audits), "demand": objects(d._asdict() for d in demand)}


PRUNE_BATCH, PRUNE_BATCHES = 20_000, 20


class PostgresFrames:
    def __init__(self, db: Pool, faults: Faults | None = None) -> None:
        self.db = db
        self._pause_left = (faults or Faults()).pause_in_frame_s

    def _pause_once(self) -> float:
        """The pause a fault asks for inside a frame's transaction: the first frame's only."""
        pause, self._pause_left = self._pause_left, 0.0
        return pause

    @asynccontextmanager
    async def frame(self) -> AsyncIterator[PostgresFrame]:
        # A short wait for a connection: a frame that cannot start soon is better retried (and its
        # late records answered 503) than left holding its clients until they time out.
        async with self.db.connection(FRAME_CONNECT_S) as conn, conn.transaction():
            yield PostgresFrame(conn, self._pause_once)

    async def allocate_plain(
        self,
        lease: Lease,
        sequence: str,
        demand: Sequence[PlainDemand],
        audits: Sequence[Audit],
    ) -> dict[tuple[str, str], int]:
        # ONE statement (frame.sql: `plain`), so one round trip and its own transaction.
        async with self.db.connection(FRAME_CONNECT_S) as conn:
            # read at each call: bench/standins.py may put a stand-in in its place
            query = statements.PLAIN
            cur = await conn.execute(query, plain_parameters(lease, sequence, demand, audits))
            found = await cur.fetchall()
        if not any(row[0] is None for row in found):
            raise lost(lease)
        return {(row[0], row[1]): row[2] for row in found if row[0] is not None}

    async def committed(self, lease: Lease, sequence: str) -> list[Span] | None:
        # Committed by this lease: its checkpoint is there under its own epoch (a new owner
        # may have committed a frame ending at the same sequence after taking the shard over).
        rows = await self.db.fetch(
            "SELECT f.ranges FROM leases l JOIN allocation_frames f ON f.stream = l.stream"
            " AND f.shard = l.shard AND f.sequence = l.sequence"
            " WHERE l.stream = %s AND l.shard = %s AND l.owner = %s AND l.epoch = %s"
            " AND l.sequence = %s",
            (lease.stream, lease.shard, lease.owner, lease.epoch, sequence),
        )
        if not rows:
            return None
        return [Span(c, p, int(f), int(t)) for found in rows for c, p, f, t in found[0]]

    async def taken(self, holders: Sequence[Holder]) -> list[Claim]:
        if not holders:
            return []
        # the keys' live answers (frame.sql: `claims`), those their own records took
        keys = objects({"counter": h.counter, "key": h.key} for h in holders)
        found = [Claim(*row) for row in await self.db.fetch(statements.CLAIMS, {"keys": keys})]
        mine = set(holders)
        return [c for c in found if Holder(c.counter, c.key, c.holder) in mine]

    async def unpublished(self, stream: str, shard: str) -> list[HeldReplies]:
        rows = await self.db.fetch(
            "SELECT id, replies FROM frame_replies"
            " WHERE stream = %s AND shard = %s AND NOT published ORDER BY id",
            (stream, shard),
        )
        return [HeldReplies(int(row[0]), bytes(row[1])) for row in rows]

    async def published(self, held: Sequence[int]) -> None:
        if held:
            await self.db.fetch(
                "UPDATE frame_replies SET published = true WHERE id = ANY(%s) RETURNING 1",
                (list(held),),
            )

    async def replayed(self, stream: str, shard: str, first: str, last: str) -> list[bytes]:
        rows = await self.db.fetch(
            "SELECT replies FROM frame_replies WHERE stream = %s AND shard = %s"
            " AND last_sequence >= %s::numeric AND first_sequence <= %s::numeric ORDER BY id",
            (stream, shard, first, last),
        )
        return [bytes(row[0]) for row in rows]

    async def held_since(self, stream: str, shard: str, seconds: float) -> list[bytes]:
        rows = await self.db.fetch(
            "SELECT replies FROM frame_replies WHERE stream = %s AND shard = %s"
            " AND committed_at > now() - make_interval(secs => %s) ORDER BY id DESC",
            (stream, shard, seconds),
        )
        return [bytes(row[0]) for row in rows]

    async def prune(self, now: datetime, audit_retention: float, reply_retention: float) -> int:
        # In batches, so that no single statement holds locks or bloats WAL for long.
        cutoff = now - timedelta(seconds=audit_retention)
        tables = [  # (table, the key of its rows, the column a row expires by, when)
            ("idempotency_keys", "ctid", "expires_at", now),
            ("voids", "ctid", "keep_until", now),
            ("dead_letters", "id", "created_at", cutoff),
            ("frame_replies", "id", "committed_at", now - timedelta(seconds=reply_retention)),
        ]
        total = (await self.prune_chains(now)).gone
        for table, key, column, bound in tables:
            statement = sql.SQL(
                "WITH gone AS (DELETE FROM {table} WHERE {key} IN"
                " (SELECT {key} FROM {table} WHERE {column} < %s LIMIT %s)"
                " RETURNING 1) SELECT count(*) FROM gone"
            ).format(
                table=sql.Identifier(table),
                key=sql.Identifier(key),
                column=sql.Identifier(column),
            )
            for _ in range(PRUNE_BATCHES):
                rows = await self.db.fetch(statement, (bound, PRUNE_BATCH))
                total += int(rows[0][0])
                if int(rows[0][0]) < PRUNE_BATCH:
                    break
        return total

    async def prune_chains(self, now: datetime) -> Pruned:
        total, starts = 0, {}
        for _ in range(PRUNE_BATCHES):
            # The audit trail's oldest rows, noting how far each counter's period was pruned.
            found = await self.db.fetch(
                "WITH gone AS (DELETE FROM allocation_frames WHERE id IN"
                " (SELECT id FROM allocation_frames WHERE keep_until < %s"
                " ORDER BY id LIMIT %s) RETURNING chain, id, hash, ranges),"
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
                " WHERE chain_starts.after_id < excluded.after_id"
                " RETURNING chain, after_id, after_hash)"
                " SELECT (SELECT count(*) FROM gone), chain, after_id, after_hash"
                " FROM (SELECT 1) AS one LEFT JOIN starts ON true",
                (now, PRUNE_BATCH),
            )
            gone = int(found[0][0])
            total += gone
            starts.update({c: Start(int(i), bytes(h)) for _, c, i, h in found if c is not None})
            if gone < PRUNE_BATCH:
                break
        return Pruned(total, starts)

    async def highest(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        # The counter's newest rows hold its period's highest value (ranges rise in commit
        # order); a period no recent row holds has no floor, and is not refused.
        # A rewind recorded and not yet mended holds the floor up as well.
        found = await self.db.fetch(
            # an audit row's range is [counter, period, first, last] (infra/ports.py: Audit)
            "SELECT p.counter, p.period, GREATEST((SELECT max((r->>3)::bigint) FROM (SELECT"
            "  f.ranges FROM allocation_frames f WHERE f.counters @> ARRAY[p.counter]"
            "  ORDER BY f.id DESC LIMIT 20) AS f, json_array_elements(f.ranges) AS r"
            "  WHERE r->>0 = p.counter AND r->>1 = p.period),"
            " (SELECT w.held FROM counter_rewinds w"
            "  WHERE w.counter = p.counter AND w.period = p.period))"
            " FROM json_to_recordset(%s::json) AS p(counter text, period text)",
            (objects({"counter": c, "period": p} for c, p in pairs),),
        )
        return {(c, p): int(top) for c, p, top in found if top is not None}

    async def rewound(self, held: Mapping[tuple[str, str], int]) -> None:
        await self.db.fetch(
            "INSERT INTO counter_rewinds AS w (counter, period, held)"
            " SELECT m.counter, m.period, m.held"
            " FROM json_to_recordset(%s::json) AS m(counter text, period text, held bigint)"
            " ON CONFLICT (counter, period) DO UPDATE SET held = GREATEST(w.held, excluded.held)"
            " RETURNING 1",
            (objects({"counter": c, "period": p, "held": h} for (c, p), h in held.items()),),
        )
