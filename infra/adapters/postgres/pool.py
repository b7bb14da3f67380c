"""The pool every role shares, the errors worth a retry, and the migrations."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib import resources
from typing import Any

import orjson
import psycopg
import psycopg_pool
from psycopg import errors as pgerrors
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from psycopg.sql import Composed

from infra.adapters import secret
from infra.adapters.postgres import versions
from infra.errors import SettingsError, StoreError, StoreUnavailable
from infra.settings import with_host
from infra.spans import plain

Connection = psycopg.AsyncConnection[tuple[Any, ...]]

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


# Every connection's limits on waiting. A frame's transaction is a few statements sent back to
# back, committed in milliseconds (docs/performance.md), so a transaction idle for seconds
# belongs to a process that stopped inside it (SIGSTOP, a VM paused, a GC pause on the way to
# a kill): Postgres ends its session, and with it the counter rows it locked, so that the
# batcher that takes its shards over is not stuck behind them (a takeover takes LEASE_TTL_S
# plus this, at most). A statement that waits this long for a lock fails instead (and its
# frame is tried again).
IDLE_IN_TRANSACTION_S = 5.0
LOCK_TIMEOUT_S = 5.0
OPTIONS = (
    f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_S * 1000:.0f}"
    f" -c lock_timeout={LOCK_TIMEOUT_S * 1000:.0f}"
)
# The same limits for one transaction, for a connection through a transaction pooler: PgBouncer
# refuses the `options` startup parameter, and RDS Proxy pins a session that SETs anything. A
# transaction's own settings end with it, so the server session goes back to the pooler clean.
# SET, not set_config(): a SELECT takes the transaction's snapshot, after which it can no longer
# SET TRANSACTION ISOLATION LEVEL (the audit trail's verify does).
LIMITS = (
    f"SET LOCAL idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_S * 1000:.0f};"
    f" SET LOCAL lock_timeout = {LOCK_TIMEOUT_S * 1000:.0f}"
)

# What PgBouncer's refusal of the startup options (above) means to the user.
POOLER_NEEDED = (
    "the server at DATABASE_URL refuses startup options, as PgBouncer in transaction mode does:"
    ' set DATABASE_POOLER=transaction (docs/deploy.md, "Behind a pooler")'
)


class Pooled(psycopg.AsyncConnection[tuple[Any, ...]]):
    """A connection through a transaction pooler (DATABASE_POOLER=transaction): every
    transaction opened on it sets numerator's limits first (LIMITS), as the startup options do
    on a connection of its own. A statement outside a transaction block holds no lock past its
    own end, so the limits of the transactions that hold locks bound its wait too."""

    @asynccontextmanager
    async def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> AsyncIterator[psycopg.AsyncTransaction]:
        outermost = self.info.transaction_status is TransactionStatus.IDLE
        async with super().transaction(savepoint_name, force_rollback) as tx:
            if outermost:
                await self.execute(LIMITS)
            yield tx


def rows(items: Iterable[Sequence[Any]]) -> str:
    """Many rows as ONE parameter, a JSON array of arrays that the statement unpacks with
    json_array_elements. psycopg dumps a Python list as an array element by element, in Python,
    far slower than orjson (docs/performance.md) — and a frame over many counters passes several
    such lists."""
    return orjson.dumps(list(items), default=plain).decode()


def objects(items: Iterable[Mapping[str, Any]]) -> str:
    """Many rows as ONE parameter, as `rows`, each a JSON object that the statement unpacks
    with json_to_recordset, by name."""
    return orjson.dumps(list(items), default=plain).decode()


def migrations() -> list[tuple[int, str]]:
    """The versioned SQL migrations shipped with the package, in order."""
    folder = resources.files("infra") / "migrations"
    found = []
    for item in folder.iterdir():
        if item.name.endswith(".sql"):
            found.append((int(item.name.split("_", 1)[0]), item.read_text()))
    return sorted(found)


def session(pooled: bool) -> dict[str, Any]:
    """What a connection asks of its server session: numerator's limits as startup options; or,
    through a transaction pooler, nothing kept in it — no prepared statements either, as the next
    transaction may run on a server session that holds another client's of the same name."""
    return {"prepare_threshold": None} if pooled else {"options": OPTIONS}


async def migrate(url: str, pooled: bool = False) -> list[int]:
    """Apply the migrations not yet applied; safe to run from several processes at once. A
    server of a version numerator does not run on is refused first (versions.check).
    `pooled`: a transaction pooler stands in front (DATABASE_POOLER=transaction)."""
    try:
        kind = Pooled if pooled else psycopg.AsyncConnection
        connect = kind.connect(url, connect_timeout=10, **session(pooled))
        async with await connect as conn:
            versions.check(conn.info.server_version, f"{conn.info.host}:{conn.info.port}")
            return await _migrate(conn)
    except RETRYABLE as exc:
        if "unsupported startup parameter" in str(exc):
            raise SettingsError("DATABASE_POOLER", POOLER_NEEDED) from None
        raise StoreUnavailable(f"cannot reach Postgres to migrate: {exc}") from exc
    except psycopg.Error as exc:
        raise StoreError(f"Postgres refused the migrations: {exc}") from exc


async def _migrate(conn: Connection) -> list[int]:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(7241001)")
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
            try:
                await conn.execute(sql.encode())
            except psycopg.Error as exc:
                if isinstance(exc, RETRYABLE):
                    raise
                raise StoreError(f"Postgres refused migration {version:03d}: {exc}") from exc
            await conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
            applied.append(version)
        return applied


class Pool:
    """A small pool of connections to one Postgres, opened by `open()` or else on first use;
    psycopg errors leave it as StoreUnavailable (worth a retry) or StoreError."""

    def __init__(
        self,
        url: str,
        max_size: int = 4,
        timeout: float = 2.0,
        secret: str = "",
        pooled: bool = False,
        per_use: bool = False,
        host: str = "",
    ) -> None:
        """`secret`: a Secrets Manager secret to read the URL from on first use, when `url` is
        empty (DATABASE_SECRET_ARN, in Lambda); `pooled`: a transaction pooler stands in front
        (DATABASE_POOLER=transaction); `per_use`: no connection kept, one opened for each use
        and closed after it (a Lambda container, frozen between invocations with whatever it
        holds: docs/architecture.md, "Connections"); `host`: where to reach the secret's
        Postgres instead of the host it names (DATABASE_HOST: an RDS Proxy's endpoint)."""
        self.url, self.secret, self.pooled, self.per_use = url, secret, pooled, per_use
        self.host = host
        self.max_size, self.timeout = max_size, timeout
        self._opened = False
        self.pool = self._pool()

    def _pool(self) -> psycopg_pool.AsyncConnectionPool[Connection]:
        return psycopg_pool.AsyncConnectionPool(
            self.url,
            connection_class=Pooled if self.pooled else psycopg.AsyncConnection,
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
                **session(self.pooled),
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
    async def connection(self, timeout: float | None = None) -> AsyncIterator[Connection]:
        if not self.url and self.secret:
            url = with_host(await secret.resolve(self.url, self.secret), self.host)
            # Calls that came together each read the secret: the first to come back makes the
            # pool. A second pool replacing it after it was opened was never opened itself, and
            # every call of the container failed on it ('pool is not open yet': sam local).
            if not self.url:
                self.url = url
                self.pool = self._pool()
        if not self.url:
            raise StoreUnavailable("no Postgres is configured here: set DATABASE_URL")
        if not self._opened and not self.per_use:  # opened on first use where nothing opened it
            await self.open()
        try:
            async with self._checkout(timeout) as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            self._forget_waiters()
            raise StoreUnavailable(f"Postgres is unavailable: {exc}") from exc
        except RETRYABLE as exc:
            raise StoreUnavailable(f"Postgres is unavailable: {exc}") from exc
        except pgerrors.UniqueViolation:
            raise
        except psycopg.Error as exc:
            raise StoreError(f"Postgres refused: {exc}") from exc

    def _checkout(self, timeout: float | None) -> AbstractAsyncContextManager[Connection]:
        return self._own() if self.per_use else self.pool.connection(timeout)

    @asynccontextmanager
    async def _own(self) -> AsyncIterator[Connection]:
        """A connection of its own for one use, closed after it."""
        kind = Pooled if self.pooled else psycopg.AsyncConnection
        conn = await kind.connect(
            self.url,
            autocommit=True,
            connect_timeout=max(2, round(self.timeout)),
            row_factory=tuple_row,
            **session(self.pooled),
        )
        async with conn:
            yield conn

    def _forget_waiters(self) -> None:
        """Drop from psycopg_pool's queue the callers that stopped waiting for a connection.
        It keeps each one (3.3.3: a WaitingClient, about 3 KB) until a connection comes to
        skip it: through an outage of minutes every call that timed out stayed, and a worker
        grew by megabytes a minute (tests/e2e/test_long_outage.py). Synchronous, so that no
        other task sees the queue half made."""
        waiting = getattr(self.pool, "_waiting", None)
        if waiting is None:
            return
        live = [w for w in waiting if w.conn is None and w.error is None]
        if len(live) < len(waiting):
            waiting.clear()
            waiting.extend(live)

    async def fetch(
        self, sql: str | Composed, params: Sequence[Any] | Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        async with self.connection() as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall()

    async def fetch_alone(
        self, sql: str | Composed, params: Sequence[Any] | Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        """`fetch` on a connection of its own, not the pool's: an answer from Postgres when the
        pool has none to give (its connections being made again after an outage, later than
        another process's); StoreUnavailable when Postgres cannot be reached from here."""
        if not self.url:
            raise StoreUnavailable("no Postgres is configured here: set DATABASE_URL")
        try:
            async with self._own() as conn:
                cur = await conn.execute(sql, params)
                return await cur.fetchall()
        except psycopg.Error as exc:
            raise StoreUnavailable(f"Postgres is unavailable: {exc}") from exc
