"""The RewindLog role: the periods batchers found below values they had handed out (Postgres forgot
commits: an asynchronous standby promoted), and an operator's mend that raises a counter past
them (docs/runbook.md)."""

from __future__ import annotations

from infra.adapters.postgres.pool import Pool
from infra.ports import Mend, Rewind


class PostgresRewinds:
    def __init__(self, db: Pool) -> None:
        self.db = db

    async def rewinds(self, name: str | None = None) -> list[Rewind]:
        found = await self.db.fetch(
            "SELECT w.counter, w.period, w.held, c.start - 1 + coalesce(v.allocated, 0),"
            " w.detected_at FROM counter_rewinds w JOIN counters c ON c.name = w.counter"
            " LEFT JOIN counter_values v ON v.counter = w.counter AND v.period = w.period"
            " WHERE %(name)s::text IS NULL OR w.counter = %(name)s ORDER BY 1, 2",
            {"name": name},
        )
        return [Rewind(*row) for row in found]

    async def mend(self, name: str, period: str, past: int | None) -> Mend | None:
        """Raise the period's counter to the rewind's `held` (or to `past`, when higher) and
        forget the rewind, in one transaction; None when the counter does not exist."""
        async with self.db.connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT start FROM counters WHERE name = %s", (name,))
            row = await cur.fetchone()
            if row is None:
                return None
            start = int(row[0])
            cur = await conn.execute(
                "DELETE FROM counter_rewinds WHERE counter = %s AND period = %s RETURNING held",
                (name, period),
            )
            gone = await cur.fetchone()
            held = int(gone[0]) if gone else None
            top = max(held if held is not None else start - 1, past if past else start - 1)
            cur = await conn.execute(
                "INSERT INTO counter_values AS cv (counter, period, allocated)"
                " VALUES (%s, %s, %s) ON CONFLICT (counter, period) DO UPDATE"
                " SET allocated = GREATEST(cv.allocated, excluded.allocated)"
                " RETURNING (SELECT allocated FROM counter_values"
                "  WHERE counter = %s AND period = %s), allocated",
                (name, period, top - start + 1, name, period),
            )
            before, after = await cur.fetchone() or (None, 0)
            return Mend(name, period, held, start - 1 + int(before or 0), start - 1 + int(after))
