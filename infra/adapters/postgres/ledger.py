"""The Ledger role: the audit trail, voids, confirmations and the hash chains."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from infra.adapters.postgres import trail
from infra.adapters.postgres.counters import COUNTER_COLUMNS, counter_of
from infra.adapters.postgres.pool import Pool
from infra.counters import Counter
from infra.ledger import Link, VoidRow, subtract
from infra.ports import ConfirmedRange, Overdue, Unconfirmed
from infra.trail import Anchor, Breach, Start


class PostgresLedger:
    def __init__(self, db: Pool) -> None:
        self.db = db

    async def trail(self, name: str) -> tuple[list[Link], dict[str, int]]:
        rows = await self.db.fetch(
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
        pruned = await self.db.fetch("SELECT period, upto FROM pruned WHERE counter = %s", (name,))
        return links, {period: int(upto) for period, upto in pruned}

    async def confirmed(self, name: str, period: str) -> list[ConfirmedRange]:
        rows = await self.db.fetch(
            "SELECT first, last FROM confirmations WHERE counter = %s AND period = %s",
            (name, period),
        )
        return [ConfirmedRange(int(a), int(b)) for a, b in rows]

    async def confirming(self) -> list[Counter]:
        rows = await self.db.fetch(f"SELECT {COUNTER_COLUMNS} FROM counters WHERE confirm", ())
        return [counter_of(row) for row in rows]

    async def unconfirmed(self, counter: Counter, ttl: float) -> Unconfirmed:
        """The values of `counter` handed out more than `ttl` seconds ago, since the last sweep,
        that are neither confirmed nor void; and up to when."""
        rows = await self.db.fetch(
            "SELECT now() - make_interval(secs => %(ttl)s),"
            " coalesce((SELECT upto FROM confirm_swept WHERE counter = %(name)s), 'epoch')",
            {"ttl": ttl, "name": counter.name},
        )
        cutoff, since = rows[0]
        frames = await self.db.fetch(
            "SELECT ranges::text FROM allocation_frames WHERE counters @> ARRAY[%s]"
            " AND committed_at > %s AND committed_at <= %s ORDER BY id",
            (counter.name, since, cutoff),
        )
        issued: dict[str, list[tuple[int, int]]] = {}
        for (text,) in frames:
            for name, period, first, last in orjson.loads(text):
                if name == counter.name:
                    issued.setdefault(period, []).append((first, last))
        out: list[Overdue] = []
        for period, spans in issued.items():
            low, high = min(f for f, _ in spans), max(last for _, last in spans)
            taken = await self.db.fetch(
                "SELECT first, last FROM confirmations WHERE counter = %(c)s AND period = %(p)s"
                " AND first <= %(high)s AND last >= %(low)s UNION ALL"
                " SELECT first, last FROM voids WHERE counter = %(c)s AND period = %(p)s"
                " AND first <= %(high)s AND last >= %(low)s",
                {"c": counter.name, "p": period, "low": low, "high": high},
            )
            out += [Overdue(period, a, b) for a, b in subtract(spans, taken)]
        return Unconfirmed(out, cutoff)

    async def swept(self, name: str, upto: datetime) -> None:
        await self.db.fetch(
            "INSERT INTO confirm_swept (counter, upto) VALUES (%s, %s) ON CONFLICT (counter)"
            " DO UPDATE SET upto = greatest(confirm_swept.upto, excluded.upto) RETURNING 1",
            (name, upto),
        )

    async def trail_size(self) -> int:
        """Bytes the audit trail takes on disk, its indexes included."""
        rows = await self.db.fetch("SELECT pg_total_relation_size('allocation_frames')", ())
        return int(rows[0][0])

    async def voids(self, name: str, period: str) -> list[VoidRow]:
        rows = await self.db.fetch(
            "SELECT counter, period, first, last, reason, who, at FROM voids"
            " WHERE counter = %s AND period = %s ORDER BY first",
            (name, period),
        )
        return [VoidRow(*row) for row in rows]

    async def verify(
        self,
        name: str | None,
        anchors: Sequence[Anchor] | None = None,
        pruned_at: Mapping[str, Start] | None = None,
    ) -> dict[str, Any]:
        async with self.db.connection() as conn:
            return await trail.verify(conn, name, anchors, pruned_at)

    async def heads(self) -> dict[str, dict[str, Any]]:
        async with self.db.connection() as conn:
            return await trail.heads(conn)

    async def holds(self, anchors: Sequence[Anchor]) -> list[Breach]:
        async with self.db.connection() as conn:
            return await trail.holds(conn, anchors)

    async def mark_edges(self, stream: str, silent: float, keep_s: float) -> int:
        async with self.db.connection() as conn:
            return await trail.mark_edges(conn, stream, silent, keep_s)
