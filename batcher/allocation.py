"""Allocation: one frame applied in one transaction. Its entries sorted (batcher/classify.py),
one delta per (counter, period) added, and the returned ranges split among the records in the
order they arrived (batcher/handout.py); here, the transaction that runs those pure steps, and the
frame's `Outcome`, built once at its end."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import orjson

from batcher.classify import Classified, ConfirmAsked, VoidAsked, classify
from batcher.handout import (
    ConfirmationsMade,
    Handed,
    Refusal,
    Taking,
    VoidsMade,
    abandon,
    assign,
    audits,
    confirmed,
    confirming,
    demand,
    freed,
    hand_out,
    holders,
    refuse,
    share,
    split_cancels,
    void_asks,
    voided,
)
from infra.counters import Counter
from infra.ports import Entry, Frames, FrameTransaction, Lease, PlainDemand, VoidAsk
from infra.spans import Span
from infra.wire import Reply

log = logging.getLogger("numerator.batcher")


@dataclass(frozen=True)
class Outcome:
    """What applying one frame did: its replies, and what the applier counts and remembers."""

    replies: list[Reply] = field(default_factory=list)
    allocated: int = 0
    dead_letters: int = 0
    expired: int = 0
    replays: int = 0
    held: int | None = None
    """The id under which the frame's replies are kept until published (durable streams)."""
    cancelled: int = 0
    """Records whose cancel came before they were applied: nothing allocated."""
    abandoned: int = 0
    """Values voided as abandoned: their record's cancel came after it was applied."""
    taken: list[Taking] = field(default_factory=list)
    """What each taking record took, by its reply key: what a later cancel voids."""
    rewound: dict[tuple[str, str], int] = field(default_factory=dict)
    """Periods refused because their counter is below their floor (a rewind), with the floor;
    `refused`: the records answered so."""
    refused: int = 0


def encode_replies(replies: Sequence[Reply]) -> bytes:
    return orjson.dumps([r.to_json() for r in replies])


def decode_replies(raw: bytes) -> list[Reply]:
    return [Reply.from_json(item) for item in orjson.loads(raw)]


@dataclass(frozen=True, slots=True)
class Basis:
    """What a frame is applied against, besides its entries and the store.

    `counters` holds the definitions of every counter the frame names that exists; `now`
    decides periods, `wall` (Unix seconds) decides which records have expired. On a durable
    stream, with `hold`, the frame's replies are kept in the same transaction (for a republish
    after a crash, and for replays); `published` names earlier held replies that have been
    published, marked in the same transaction. Entries at or below `lease.applied` are replays:
    answered from `earlier` (their kept replies, by reply key), never allocated again.
    `retention`: how long an Idempotency-Key's claim is kept (IDEMPOTENCY_RETENTION_S);
    `keep`: how long audit rows are kept for counters without a retention of their own
    (AUDIT_RETENTION_S); `recent`: the (counter, period, first, last) of records applied lately,
    by reply key, which a cancel voids; `floors`: see below."""

    counters: Mapping[str, Counter]
    lease: Lease
    now: datetime
    wall: float
    retention: float
    keep: float = 86_400.0
    hold: bool = False
    published: Sequence[int] = ()
    earlier: Mapping[str, Reply] = field(default_factory=dict)
    recent: Mapping[str, Span] = field(default_factory=dict)
    floors: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """Per (counter, period), the highest value the audit trail holds: no value at or below it
    is handed out again, even when `counter_values` was moved back."""

    def floor(self, name: str, period: str) -> int:
        """The floor as a count of values handed out, as `counter_values` keeps it."""
        top = self.floors.get((name, period))
        return 0 if top is None else top - self.counters[name].start + 1


async def apply(entries: Sequence[Entry], store: Frames, basis: Basis) -> Outcome:
    """Apply one frame: classify its entries, then one transaction that allocates one delta
    per (counter, period) and records what else the frame asks, then split the ranges."""
    classified = classify(
        entries, basis.counters, basis.lease, basis.now, basis.wall, basis.earlier
    )
    if classified.plain() and not basis.hold and not basis.published:
        return await _apply_plain(entries, store, classified, basis)
    return await _apply_frame(entries, store, classified, basis)


async def _apply_plain(
    entries: Sequence[Entry], store: Frames, classified: Classified, basis: Basis
) -> Outcome:
    """A plain frame (the embedded path's usual one): ONE statement, its own transaction. At
    low load each round trip wakes Postgres and this process in turn; four of them (BEGIN,
    allocate, checkpoint, COMMIT) were most of a lone request's time."""
    counters, keep, live = basis.counters, basis.keep, classified.live
    wanted = demand(live)
    plain = []
    for (name, period), counts in wanted.items():
        counter = counters[name]
        klass, floor = counter.keeping(keep).klass, basis.floor(name, period)
        plain.append(PlainDemand(name, period, sum(counts), counter.start, klass, floor))
    rows = audits(live, (), counters, keep)
    totals = await store.allocate_plain(
        basis.lease, entries[-1].sequence, plain, list(rows.values())
    )
    refusal = refuse(live, wanted, totals, basis.floors)
    handed = hand_out(refusal.takers, refusal.wanted, totals, counters)
    replies = [*classified.replies, *refusal.replies, *handed.replies]
    return _outcome(classified, replies, handed, refusal)


async def _apply_frame(
    entries: Sequence[Entry], store: Frames, classified: Classified, basis: Basis
) -> Outcome:
    """Any other frame, in one transaction: claims, allocation, voids, confirmations, audit
    rows, dead letters, the checkpoint and (durable streams) the held replies."""
    counters, keep = basis.counters, basis.keep
    async with store.frame() as tx:
        keyed = classified.keyed()
        found = await tx.claims(list(keyed)) if keyed else {}
        takers, sharers = assign(classified.live, found)
        wanted = demand(takers)
        floors = {(n, p): basis.floor(n, p) for n, p in wanted}
        totals = await tx.allocate({k: sum(v) for k, v in wanted.items()}, floors) if wanted else {}
        refusal = refuse(takers, wanted, totals, basis.floors)
        handed = hand_out(refusal.takers, refusal.wanted, totals, counters)
        found.update(((claim.counter, claim.key), claim) for claim in handed.claims)
        shared = share(sharers, found)
        await tx.remember(handed.claims, basis.retention)
        await tx.hand_over(holders(sharers, shared))
        abandoned = await _abandoned(tx, classified, basis)
        voids = await _void(tx, classified.voids, abandoned, keep, basis.now)
        confirms = await _confirm(tx, classified.confirms, keep, basis.now)
        rows = audits(refusal.takers, voids.made, counters, keep, confirms.made)
        for span in handed.ranges:
            rows[counters[span.counter].keeping(keep).klass].ranges.append(span)
        await tx.dead_letter(classified.letters)
        await tx.checkpoint(basis.lease, entries[-1].sequence, list(rows.values()))
        await tx.published(basis.published)
        replies = [
            *classified.replies,
            *refusal.replies,
            *handed.replies,
            *shared,
            *voids.replies,
            *confirms.replies,
        ]
        held = None
        if basis.hold:
            first, last = entries[0].sequence, entries[-1].sequence
            held = await tx.hold(basis.lease, first, last, encode_replies(replies))
    return _outcome(
        classified,
        replies,
        handed,
        refusal,
        held=held,
        abandoned=voids.abandoned,
        dead_letters=len(classified.letters),
    )


def _outcome(
    classified: Classified,
    replies: list[Reply],
    handed: Handed,
    refusal: Refusal,
    held: int | None = None,
    abandoned: int = 0,
    dead_letters: int = 0,
) -> Outcome:
    return Outcome(
        replies,
        allocated=handed.allocated,
        dead_letters=dead_letters,
        expired=classified.expired,
        replays=classified.replays,
        held=held,
        cancelled=classified.cancelled,
        abandoned=abandoned,
        taken=handed.taken,
        rewound=refusal.rewound,
        refused=len(refusal.replies),
    )


async def _abandoned(tx: FrameTransaction, classified: Classified, basis: Basis) -> list[VoidAsk]:
    """The voids, reason `abandoned`, that the frame's cancels of records applied in earlier
    frames make: a keyed request's once every record holding its key was cancelled (`free`)."""
    counters, keep = basis.counters, basis.keep
    held, plain = split_cancels(classified.cancels)
    released = await tx.free(held) if held else []
    abandoned = abandon(plain, basis.recent, counters, keep)
    return abandoned + freed(released, classified.cancels, counters, keep)


async def _void(
    tx: FrameTransaction,
    voids: Sequence[VoidAsked],
    abandoned: Sequence[VoidAsk],
    keep: float,
    now: datetime,
) -> VoidsMade:
    """Make the frame's voids in its transaction."""
    asks = void_asks(voids, keep)
    return voided(voids, asks, abandoned, await tx.void([*asks, *abandoned]), now)


async def _confirm(
    tx: FrameTransaction, confirms: Sequence[ConfirmAsked], keep: float, now: datetime
) -> ConfirmationsMade:
    """Record the frame's confirmations in its transaction."""
    asking = confirming(confirms, keep)
    return confirmed(asking, await tx.confirm(asking.asks), now)
