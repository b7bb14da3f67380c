"""The Store port on Postgres (psycopg 3, async pool), one module per role of infra/ports.py:
`pool` (connections, retryable errors, migrations), `counters`, `keys`, `leases` (and edges),
`frames` (with `frame`, the FrameTransaction, and `statements` the two share), `ledger` (with
`trail`, the audit trail's own statements), `rewinds`. psycopg errors never leave this package."""

from __future__ import annotations

from infra.adapters.postgres.counters import PostgresCounters
from infra.adapters.postgres.frames import PostgresFrames
from infra.adapters.postgres.keys import PostgresKeys
from infra.adapters.postgres.leases import PostgresLeases
from infra.adapters.postgres.ledger import PostgresLedger
from infra.adapters.postgres.pool import IDLE_IN_TRANSACTION_S, Pool, migrate, migrations
from infra.adapters.postgres.rewinds import PostgresRewinds
from infra.faults import Faults

__all__ = ["IDLE_IN_TRANSACTION_S", "Pool", "PostgresStore", "migrate", "migrations"]


class PostgresStore(
    PostgresCounters, PostgresKeys, PostgresLeases, PostgresFrames, PostgresLedger, PostgresRewinds
):
    """Every role on one pool: what a process that uses several roles opens and closes once.
    Each role's class also stands alone on a Pool (`PostgresCounters(Pool(url))`)."""

    def __init__(
        self,
        url: str,
        max_size: int = 4,
        timeout: float = 2.0,
        secret: str = "",
        faults: Faults | None = None,
        pooled: bool = False,
        per_use: bool = False,
        host: str = "",
    ) -> None:
        """`secret`: a Secrets Manager secret to read the URL from on first use, when `url` is
        empty (DATABASE_SECRET_ARN, in Lambda); `faults`: the crash tests' switches; `pooled`:
        a transaction pooler stands in front (DATABASE_POOLER=transaction); `per_use`: a
        connection opened for each use and closed after it, none kept (a Lambda container);
        `host`: where to reach the secret's Postgres instead (DATABASE_HOST)."""
        # Every role's __init__ only keeps the pool; the frames' also keeps the faults.
        pool = Pool(url, max_size, timeout, secret, pooled, per_use, host)
        PostgresFrames.__init__(self, pool, faults)

    async def open(self) -> None:
        await self.db.open()

    async def close(self) -> None:
        await self.db.close()
