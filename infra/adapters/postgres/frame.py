"""The FrameTransaction: one frame's statements on one connection, in one transaction."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from psycopg import sql

from infra.adapters.postgres.pool import Connection, objects
from infra.adapters.postgres.statements import (
    ALLOCATE,
    CHECKPOINT,
    CLAIMS,
    FORGET,
    FREE,
    HAND_OVER,
    REMEMBER,
    RESERVE,
    chained,
    lost,
)
from infra.ledger import VoidReason
from infra.ports import Audit, Claim, ConfirmAsk, DeadLetter, Holder, Lease, Made, NotMade, VoidAsk
from infra.wire import ReplyError

log = logging.getLogger("numerator.batcher")


class PostgresFrame:
    """One frame's transaction on one connection (see FrameTransaction in ports)."""

    def __init__(self, conn: Connection, pause: Callable[[], float] = lambda: 0.0) -> None:
        """`pause`: how long to wait once the counter rows are locked (Faults.pause_in_frame_s,
        for the first frame only)."""
        self.conn, self.pause = conn, pause

    async def claims(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Claim]:
        # Reserve the keys that have no live answer (frame.sql: `reserve`): a concurrent frame
        # holding one — another worker's batcher — makes this wait until that frame ends; once
        # it commits, its answer is read below and shared, instead of a second allocation
        # overwriting it.
        wanted = objects({"counter": c, "key": k} for c, k in sorted(keys))
        cur = await self.conn.execute(RESERVE, {"keys": wanted})
        reserved = {(row[0], row[1]) for row in await cur.fetchall()}
        if len(reserved) == len(keys):
            return {}
        taken = objects({"counter": c, "key": k} for c, k in keys if (c, k) not in reserved)
        cur = await self.conn.execute(CLAIMS, {"keys": taken})
        return {(row[0], row[1]): Claim(*row) for row in await cur.fetchall()}

    async def allocate(
        self, deltas: dict[tuple[str, str], int], floors: Mapping[tuple[str, str], int]
    ) -> dict[tuple[str, str], int]:
        # One statement for every counter of the frame (frame.sql: `allocate`).
        wanted = [
            {"counter": c, "period": p, "delta": deltas[(c, p)], "floor": floors.get((c, p), 0)}
            for c, p in sorted(deltas)
        ]
        cur = await self.conn.execute(ALLOCATE, {"deltas": objects(wanted)})
        totals = {(row[0], row[1]): row[2] for row in await cur.fetchall()}
        pause = self.pause()
        if pause:
            log.warning("pausing %gs inside the frame's transaction", pause)
            await asyncio.sleep(pause)
        return totals

    async def remember(self, claims: Sequence[Claim], retention: float) -> None:
        if not claims:
            return
        made = objects(
            {
                "counter": c.counter,
                "key": c.key,
                "count": c.count,
                "first": c.first,
                "last": c.last,
                "day": c.day,
                "holder": c.holder,
            }
            for c in claims
        )
        await self.conn.execute(REMEMBER, {"retention": retention, "claims": made})

    async def hand_over(self, holders: Sequence[Holder]) -> None:
        if holders:
            await self.conn.execute(HAND_OVER, {"holders": objects(h._asdict() for h in holders)})

    async def free(self, holders: Sequence[Holder]) -> list[Claim]:
        if not holders:
            return []
        # A key all of whose holders were cancelled is forgotten (its claim returned, to void);
        # one some of whose holders were, keeps the others (frame.sql: `forget`, `free`).
        cancelled = {"holders": objects(h._asdict() for h in holders)}
        cur = await self.conn.execute(FORGET, cancelled)
        freed = [Claim(*row) for row in await cur.fetchall()]
        await self.conn.execute(FREE, cancelled)
        return freed

    async def dead_letter(self, letters: Sequence[DeadLetter]) -> None:
        if not letters:
            return
        async with self.conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO dead_letters (stream, shard, sequence, problem, raw)"
                " VALUES (%s, %s, %s, %s, %s)",
                [(x.stream, x.shard, x.sequence, x.problem, x.raw) for x in letters],
            )

    async def void(self, asks: Sequence[VoidAsk]) -> list[Made]:
        results: list[Made] = []
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
                results.append(NotMade(ReplyError.ALREADY_VOID, why))
                continue
            if ask.reason == VoidReason.NOT_CONFIRMED and await self._overlap("confirmations", ask):
                why = "some of these values were confirmed since: the sweep tries again"
                results.append(NotMade(ReplyError.ALREADY_VOID, why))
                continue
            await self.conn.execute(
                "INSERT INTO voids (counter, period, first, last, reason, who, keep_until)"
                " VALUES (%s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s))",
                (ask.counter, ask.period, ask.first, ask.last, ask.reason, ask.who, ask.keep_s),
            )
            results.append(True)
        return results

    async def _issued(self, ask: VoidAsk | ConfirmAsk) -> NotMade | None:
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
        return NotMade(
            ReplyError.NOT_ISSUED,
            f"values {ask.first} to {ask.last} of period {ask.period!r} were not all handed "
            f"out ({shown}, from {ask.start})",
        )

    async def _overlap(self, table: str, ask: VoidAsk | ConfirmAsk) -> list[tuple[Any, ...]]:
        columns = ["first", "last", "reason"] if table == "voids" else ["first", "last"]
        cur = await self.conn.execute(
            sql.SQL(
                "SELECT {} FROM {} WHERE counter = %s AND period = %s AND first <= %s"
                " AND last >= %s ORDER BY first"
            ).format(sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(table)),
            (ask.counter, ask.period, ask.last, ask.first),
        )
        return await cur.fetchall()

    async def confirm(self, asks: Sequence[ConfirmAsk]) -> list[Made]:
        results: list[Made] = []
        for ask in asks:
            refused = await self._issued(ask)
            if refused is None:
                void = await self._overlap("voids", ask)
                if void:
                    first, last, reason = void[0]
                    why = f"values {first} to {last} are void, for {reason!r}"
                    refused = NotMade(ReplyError.ALREADY_VOID, why)
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
        # The fence, the checkpoint and the frame's audit rows in one statement (frame.sql:
        # `checkpoint`): one round trip.
        cur = await self.conn.execute(CHECKPOINT, chained(lease, sequence, audits))
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
