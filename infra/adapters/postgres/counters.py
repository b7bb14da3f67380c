"""The Counters role: counter definitions, and how many values each has handed out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import errors as pgerrors

from infra.adapters.postgres.pool import Pool
from infra.counters import Counter, Reset
from infra.errors import CounterExists

COUNTER_COLUMNS = "name, start, template, reset, timezone, retention_days, confirm"


def counter_of(row: tuple[Any, ...]) -> Counter:
    """A counter from its row's COUNTER_COLUMNS."""
    name, start, template, reset, timezone, retention, confirm = row
    return Counter(name, start, template, Reset(reset), timezone, retention, confirm)


class PostgresCounters:
    def __init__(self, db: Pool) -> None:
        self.db = db

    async def create(self, counter: Counter) -> None:
        try:
            async with self.db.connection() as conn:
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
        rows = await self.db.fetch(
            f"SELECT {COUNTER_COLUMNS} FROM counters WHERE name = %s", (name,)
        )
        return counter_of(rows[0]) if rows else None

    async def get_many(self, names: Sequence[str]) -> dict[str, Counter]:
        rows = await self.db.fetch(
            f"SELECT {COUNTER_COLUMNS} FROM counters WHERE name = ANY(%s)", (list(names),)
        )
        return {row[0]: counter_of(row) for row in rows}

    async def page(self, after: str | None, limit: int) -> list[Counter]:
        rows = await self.db.fetch(
            f"SELECT {COUNTER_COLUMNS} FROM counters WHERE name > %s ORDER BY name LIMIT %s",
            (after or "", limit),
        )
        return [counter_of(row) for row in rows]

    async def allocated(self, name: str, period: str) -> int:
        rows = await self.db.fetch(
            "SELECT allocated FROM counter_values WHERE counter = %s AND period = %s",
            (name, period),
        )
        return int(rows[0][0]) if rows else 0

    async def set_retention(self, name: str, days: int | None) -> Counter | None:
        rows = await self.db.fetch(
            f"UPDATE counters SET retention_days = %s WHERE name = %s RETURNING {COUNTER_COLUMNS}",
            (days, name),
        )
        return counter_of(rows[0]) if rows else None

    async def ping(self) -> None:
        await self.db.fetch("SELECT 1", ())
