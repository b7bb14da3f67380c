"""Allocation: turn one frame's records into one delta per (counter, period), apply them in one
transaction, and split the returned ranges among the records in the order they arrived."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime

import orjson

from infra.counters import Counter
from infra.ledger import VoidReason
from infra.ports import (
    Audit,
    Claim,
    ConfirmAsk,
    DeadLetter,
    Entry,
    Frames,
    FrameTransaction,
    Holder,
    Lease,
    PlainDemand,
    Refused,
    VoidAsk,
)
from infra.spans import Run, Span
from infra.wire import Cancel, Confirm, Record, Reply, ReplyError, Void, edge_of_key, encode

log = logging.getLogger("numerator.batcher")


@dataclass
class Outcome:
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
    taken: list[tuple[str, Span]] = field(default_factory=list)
    """Each taking record's reply key and (counter, period, first, last): what a later cancel
    voids."""
    rewound: dict[tuple[str, str], int] = field(default_factory=dict)
    """Periods refused because their counter is below their floor (a rewind), with the floor;
    `refused`: the records answered so."""
    refused: int = 0

    def add(self, handed: Handed) -> None:
        self.replies.extend(handed.replies)
        self.taken.extend(handed.taken)
        self.allocated += handed.allocated


def encode_replies(replies: Sequence[Reply]) -> bytes:
    return orjson.dumps([r.to_json() for r in replies])


def decode_replies(raw: bytes) -> list[Reply]:
    return [Reply.from_json(item) for item in orjson.loads(raw)]


def split(start: int, total: int, counts: Sequence[int]) -> list[tuple[int, int]]:
    """Ranges for `counts` taken in order from the last sum(counts) of `total` allocated values
    of a period whose first value is `start`."""
    cursor = start + total - sum(counts)
    ranges = []
    for count in counts:
        ranges.append((cursor, cursor + count - 1))
        cursor += count
    return ranges


def error(record_key: str, counter: str, kind: ReplyError, detail: str) -> Reply:
    return Reply(key=record_key, counter=counter, error=kind, detail=detail)


@dataclass(frozen=True, slots=True)
class Live:
    """A record that asks for values: its counter's definition, and the period and day it
    falls in at the frame's time."""

    record: Record
    counter: Counter
    period: str
    day: date


@dataclass
class Classified:
    """A frame's entries sorted by what becomes of them (`classify`): answered without any
    allocation (replays, poison records, expired ones, unknown counters), or `live`."""

    live: list[Live] = field(default_factory=list)
    voids: list[tuple[Void, Counter, str]] = field(default_factory=list)
    """Voids asked for, each with its counter and period."""
    confirms: list[tuple[Confirm, Counter, str]] = field(default_factory=list)
    """Confirmations asked for, each with its counter and period."""
    cancels: list[Cancel] = field(default_factory=list)
    """Cancels of records applied in earlier frames: their values become void, abandoned."""
    cancelled: int = 0
    """Records of this frame whose cancel came in the same frame: they allocate nothing."""
    replies: list[Reply] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)
    replays: int = 0
    expired: int = 0

    def cancel(self, cancel: Cancel) -> None:
        """Its record, when it is in this frame (before it), allocates nothing; else it was
        applied in an earlier frame, or never will be."""
        for i, one in enumerate(self.live):
            if one.record.key == cancel.key:
                del self.live[i]
                self.cancelled += 1
                return
        self.cancels.append(cancel)

    def replay(self, entry: Entry, earlier: Mapping[str, Reply]) -> None:
        self.replays += 1
        if entry.key:
            self.replies.append(_replayed(entry, earlier))

    def unreadable(self, entry: Entry, stream: str) -> None:
        """A record that does not decode: a dead letter, answered if its reply key was read."""
        self.letters.append(
            DeadLetter(stream, entry.shard, entry.sequence, entry.problem, entry.raw)
        )
        if entry.key:
            self.replies.append(error(entry.key, "", ReplyError.BAD_RECORD, entry.problem))

    def expire(self, record: Record | Void) -> None:
        self.expired += 1
        detail = "the request's deadline passed before its frame"
        self.replies.append(error(record.key, record.counter, ReplyError.EXPIRED, detail))

    def unknown(self, entry: Entry, record: Record | Void, stream: str) -> None:
        """A record of a counter that does not exist: a dead letter, answered."""
        problem = f"no counter named {record.counter!r}"
        self.letters.append(DeadLetter(stream, entry.shard, entry.sequence, problem, _raw(entry)))
        self.replies.append(
            error(record.key, record.counter, ReplyError.COUNTER_NOT_FOUND, problem)
        )

    def plain(self) -> bool:
        """Whether the frame only takes values, without Idempotency-Keys: one statement does."""
        return bool(self.live) and not (
            self.keyed() or self.voids or self.confirms or self.cancels or self.letters
        )

    def keyed(self) -> set[tuple[str, str]]:
        """The (counter, Idempotency-Key) pairs the live records carry."""
        return {
            (live.record.counter, live.record.idempotency_key)
            for live in self.live
            if live.record.idempotency_key is not None
        }


def classify(
    entries: Sequence[Entry],
    counters: Mapping[str, Counter],
    lease: Lease,
    now: datetime,
    wall: float,
    earlier: Mapping[str, Reply],
) -> Classified:
    """Sort a frame's entries (pure): entries at or below `lease.applied` are replays,
    answered from `earlier`; a record that does not decode, or names no counter, is a dead
    letter; one whose deadline passed before `wall` expires; voids are set apart with the
    period they name (or the one `now` puts their counter in); the rest are live, in order,
    each with the period `now` puts it in."""
    out = Classified()
    periods = Periods(now)
    for entry in entries:
        record = entry.record
        if lease.applied is not None and int(entry.sequence) <= lease.applied:
            out.replay(entry, earlier)
        elif isinstance(record, Cancel):
            out.cancel(record)
        elif record is None:
            out.unreadable(entry, lease.stream)
        elif record.deadline and record.deadline < wall:
            out.expire(record)
        elif record.counter not in counters:
            out.unknown(entry, record, lease.stream)
        elif isinstance(record, Confirm):
            counter = counters[record.counter]
            out.confirms.append((record, counter, asked(record, counter, now)))
        elif isinstance(record, Void):
            counter = counters[record.counter]
            out.voids.append((record, counter, asked(record, counter, now)))
        else:
            counter = counters[record.counter]
            out.live.append(Live(record, counter, *periods.of(counter)))
    return out


def asked(void: Void, counter: Counter, now: datetime) -> str:
    """The period a void (or a confirmation) names: its own, its day's, else the current one."""
    if void.period is not None:
        return void.period
    if void.day is not None:
        return counter.reset.period(void.day)
    return counter.period(now)


class Periods:
    """The period and day each counter is in at `now`, worked out once per counter in a frame
    (and the day once per time zone: a frame over many counters has few zones)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.counters: dict[str, tuple[str, date]] = {}
        self.days: dict[str, date] = {}

    def of(self, counter: Counter) -> tuple[str, date]:
        found = self.counters.get(counter.name)
        if found is None:
            day = self.days.get(counter.timezone)
            if day is None:
                day = self.days[counter.timezone] = counter.today(self.now)
            found = self.counters[counter.name] = (counter.reset.period(day), day)
        return found


def assign(
    live: Sequence[Live], found: dict[tuple[str, str], Claim]
) -> tuple[list[Live], list[Live]]:
    """Which live records take new values (pure), and which share an answer: a record whose
    Idempotency-Key already has a claim (`found`), or follows another record of this frame with
    the same key, takes nothing of its own."""
    takers: list[Live] = []
    sharers: list[Live] = []
    first: set[tuple[str, str]] = set()
    for one in live:
        key = one.record.idempotency_key
        if key is not None:
            pair = (one.record.counter, key)
            if pair in found or pair in first:
                sharers.append(one)
                continue
            first.add(pair)
        takers.append(one)
    return takers, sharers


def demand(takers: Sequence[Live]) -> dict[tuple[str, str], list[int]]:
    """Each (counter, period)'s counts, in arrival order (pure): one delta each, their sum."""
    wanted: dict[tuple[str, str], list[int]] = {}
    for one in takers:
        wanted.setdefault((one.counter.name, one.period), []).append(one.record.count)
    return wanted


def share(sharers: Sequence[Live], claims: dict[tuple[str, str], Claim]) -> list[Reply]:
    """The replies of records whose Idempotency-Key has an answer (pure): that answer, or
    idempotency-key-reused when they asked for another count."""
    replies = []
    for one in sharers:
        record = one.record
        assert record.idempotency_key is not None
        claim = claims[(record.counter, record.idempotency_key)]
        if claim.count != record.count:
            detail = f"this Idempotency-Key was first used with count={claim.count}"
            replies.append(
                error(record.key, record.counter, ReplyError.IDEMPOTENCY_KEY_REUSED, detail)
            )
        else:
            replies.append(
                Reply(
                    record.key,
                    record.counter,
                    claim.first,
                    claim.last,
                    one.counter.template,
                    claim.day,
                )
            )
    return replies


def audits(
    takers: Sequence[Live],
    made: Sequence[VoidAsk],
    counters: Mapping[str, Counter],
    keep: float,
    confirmed: Sequence[ConfirmAsk] = (),
) -> dict[str, Audit]:
    """The frame's audit rows by retention class, their ranges still to fill (pure): for each
    (counter, period), who took its values, run by run in the order its range is split; and
    each void made, under its counter's class (`keep`: AUDIT_RETENTION_S, for counters without
    a retention of their own). A Run is [size, who, Idempotency-Key or None, edge] (the edge: the
    prefix of the record's reply key, which the edge that asked is known by): records in a row
    from the same requester through the same edge without a key make one run, so that a hot
    counter's frame says 'key:ab12 took 300' once, not 300 times."""
    rows: dict[str, Audit] = {}
    runs: dict[tuple[str, str], Runs] = {}

    def row(counter: Counter) -> Audit:
        klass, keep_s = counter.keeping(keep)
        if klass not in rows:
            rows[klass] = Audit(klass, keep_s, {"r": [], "v": []})
        return rows[klass]

    for one in takers:  # per record: kept lean
        record, pair = one.record, (one.counter.name, one.period)
        group = runs.get(pair)
        if group is None:
            group = runs[pair] = Runs()
            row(one.counter).detail["r"].append([*pair, group.done])
        who, idem, edge = record.who, record.idempotency_key, edge_of_key(record.key)
        if isinstance(who, str):
            group.add(record.count, who, idem, edge)
            continue
        for count, part in who:  # a front frame's record: its requesters, run by run
            group.add(count, part, idem, edge)
    for group in runs.values():
        group.close()
    for ask in made:
        void = [ask.counter, ask.period, ask.first, ask.last, ask.reason, ask.who]
        row(counters[ask.counter]).detail["v"].append(void)
    for confirm in confirmed:
        done = [confirm.counter, confirm.period, confirm.first, confirm.last, confirm.who]
        row(counters[confirm.counter]).detail.setdefault("c", []).append(done)
    return rows


class Runs:
    """A (counter, period)'s runs in a frame, the last one still growing as records come: a
    Run is made once per run, not once per record (a hot counter's frame is one long run)."""

    __slots__ = ("done", "edge", "key", "size", "who")

    def __init__(self) -> None:
        self.done: list[Run] = []
        self.size, self.who, self.edge = 0, "", ""
        self.key: str | None = None

    def add(self, count: int, who: str, key: str | None, edge: str) -> None:
        """`count` values taken by `who` through `edge`: the growing run's, if it is theirs
        and neither has an Idempotency-Key; else the start of the next run."""
        if key is None and self.size and self.key is None and who == self.who and edge == self.edge:
            self.size += count
            return
        self.close()
        self.size, self.who, self.key, self.edge = count, who, key, edge

    def close(self) -> None:
        if self.size:
            self.done.append(Run(self.size, self.who, self.key, self.edge))
            self.size = 0


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
    out = Outcome(classified.replies, replays=classified.replays, expired=classified.expired)
    out.cancelled = classified.cancelled
    if classified.plain() and not basis.hold and not basis.published:
        await _apply_plain(entries, store, classified.live, basis, out)
    else:
        await _apply_frame(entries, store, classified, basis, out)
        out.dead_letters = len(classified.letters)
    return out


async def _apply_plain(
    entries: Sequence[Entry], store: Frames, live: Sequence[Live], basis: Basis, out: Outcome
) -> None:
    """A plain frame (the embedded path's usual one): ONE statement, its own transaction. At
    low load each round trip wakes Postgres and this process in turn; four of them (BEGIN,
    allocate, checkpoint, COMMIT) were most of a lone request's time."""
    counters, keep = basis.counters, basis.keep
    wanted = demand(live)
    plain = [
        PlainDemand(
            n, p, sum(c), counters[n].start, counters[n].keeping(keep).klass, basis.floor(n, p)
        )
        for (n, p), c in wanted.items()
    ]
    rows = audits(live, (), counters, keep)
    totals = await store.allocate_plain(
        basis.lease, entries[-1].sequence, plain, list(rows.values())
    )
    live, wanted = refuse(live, wanted, totals, basis, out)
    out.add(hand_out(live, wanted, totals, counters))


def refuse(
    takers: Sequence[Live],
    wanted: Mapping[tuple[str, str], list[int]],
    totals: Mapping[tuple[str, str], int],
    basis: Basis,
    out: Outcome,
) -> tuple[list[Live], dict[tuple[str, str], list[int]]]:
    """Answer the takers of periods the store would not add to (their `counter_values` row is
    below the floor: values the audit trail holds, or this batcher handed out, or a rewind
    recorded) with a refusal, `rewound`, noted in `out` (the applier says so, once); the
    takers and demand left."""
    refused = {pair for pair in wanted if pair not in totals}
    if not refused:
        return list(takers), dict(wanted)
    for pair in refused:
        out.rewound[pair] = basis.floors.get(pair, 0)
    for one in takers:
        pair = (one.counter.name, one.period)
        if pair in refused:
            why = (
                f"counter {pair[0]!r} period {pair[1]!r} is below {out.rewound[pair]}, a value "
                "already handed out (Postgres forgot commits, or counter_values was moved "
                "back): refused, so that none is handed out twice, until an operator runs "
                "`numerator counters mend` (see numerator audit verify)"
            )
            out.replies.append(error(one.record.key, pair[0], ReplyError.REWOUND, why))
            out.refused += 1
    left = [one for one in takers if (one.counter.name, one.period) not in refused]
    return left, {k: v for k, v in wanted.items() if k not in refused}


async def _apply_frame(
    entries: Sequence[Entry],
    store: Frames,
    classified: Classified,
    basis: Basis,
    out: Outcome,
) -> None:
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
        takers, wanted = refuse(takers, wanted, totals, basis, out)
        handed = hand_out(takers, wanted, totals, counters)
        out.add(handed)
        found.update(((claim.counter, claim.key), claim) for claim in handed.claims)
        replies = share(sharers, found)
        out.replies.extend(replies)
        await tx.remember(handed.claims, basis.retention)
        await tx.hand_over(holders(sharers, replies))
        held, plain = split_cancels(classified.cancels)
        released = await tx.free(held) if held else []
        abandoned = abandon(plain, basis.recent, counters, keep)
        abandoned += freed(released, classified.cancels, counters, keep)
        made = await _void(tx, classified.voids, abandoned, keep, basis.now, out)
        confirmed = await _confirm(tx, classified.confirms, keep, basis.now, out)
        rows = audits(takers, made, counters, keep, confirmed)
        for span in handed.ranges:
            rows[counters[span.counter].keeping(keep).klass].ranges.append(span)
        await tx.dead_letter(classified.letters)
        await tx.checkpoint(basis.lease, entries[-1].sequence, list(rows.values()))
        await tx.published(basis.published)
        if basis.hold:
            out.held = await tx.hold(
                basis.lease,
                entries[0].sequence,
                entries[-1].sequence,
                encode_replies(out.replies),
            )


def holders(sharers: Sequence[Live], replies: Sequence[Reply]) -> list[Holder]:
    """(counter, Idempotency-Key, reply key) of each record of this frame answered its key's
    values again (pure): each now holds them too, until its own cancel."""
    return [
        Holder(one.record.counter, one.record.idempotency_key, one.record.key)
        for one, reply in zip(sharers, replies, strict=True)
        if one.record.idempotency_key is not None and reply.error is None
    ]


def split_cancels(cancels: Sequence[Cancel]) -> tuple[list[Holder], list[Cancel]]:
    """The cancels of requests with an Idempotency-Key, as (counter, key, reply key), and the
    others (pure). A keyed request's values are voided only once every request they were
    answered to was cancelled: a retry may have been answered them since (docs/invoices.md: a
    cancel and a retry)."""
    keyed: list[Holder] = []
    plain: list[Cancel] = []
    for cancel in cancels:
        if cancel.idempotency_key is None:
            plain.append(cancel)
        else:
            keyed.append(Holder(cancel.counter, cancel.idempotency_key, cancel.key))
    return keyed, plain


def freed(
    released: Sequence[Claim],
    cancels: Sequence[Cancel],
    counters: Mapping[str, Counter],
    keep: float,
) -> list[VoidAsk]:
    """The voids, reason `abandoned`, of the keyed requests' values their cancels released."""
    who = {cancel.key: cancel.who for cancel in cancels}
    asks = []
    for claim in released:
        counter = counters.get(claim.counter)
        if counter is None:
            continue
        asks.append(
            VoidAsk(
                claim.counter,
                counter.reset.period(claim.day),
                claim.first,
                claim.last,
                VoidReason.ABANDONED,
                who.get(claim.holder, ""),
                counter.start,
                counter.keeping(keep).keep_s,
            )
        )
    return asks


def abandon(
    cancels: Sequence[Cancel],
    recent: Mapping[str, Span],
    counters: Mapping[str, Counter],
    keep: float,
) -> list[VoidAsk]:
    """The voids, reason `abandoned`, of the records whose cancel came after they were applied
    (pure): their ranges from `recent`, what was applied lately (by this batcher, or on a
    durable stream by the shard's previous owner, from the replies its frames kept). A cancel
    of a record never applied voids nothing."""
    asks = []
    for cancel in cancels:
        found = recent.get(cancel.key)
        counter = counters.get(cancel.counter)
        if found is None or counter is None:
            continue
        name, period, first, last = found
        keep_s = counter.keeping(keep).keep_s
        asks.append(
            VoidAsk(
                name, period, first, last, VoidReason.ABANDONED, cancel.who, counter.start, keep_s
            )
        )
    return asks


async def _void(
    tx: FrameTransaction,
    voids: Sequence[tuple[Void, Counter, str]],
    abandoned: Sequence[VoidAsk],
    keep: float,
    now: datetime,
    out: Outcome,
) -> list[VoidAsk]:
    """Make the frame's voids in its transaction, answering each asked for (an abandoned
    one has no one to answer); the ones newly made."""
    asks = [
        VoidAsk(
            counter.name,
            period,
            void.first,
            void.last,
            void.reason,
            void.who,
            counter.start,
            counter.keeping(keep).keep_s,
        )
        for void, counter, period in voids
    ]
    results = await tx.void([*asks, *abandoned])
    gone = results[len(asks) :]
    made = [ask for ask, result in zip(abandoned, gone, strict=True) if result is True]
    out.abandoned = sum(ask.last - ask.first + 1 for ask in made)
    for ask, (void, counter, _), result in zip(asks, voids, results, strict=False):
        if result is True:
            made.append(ask)
        if void.reason == VoidReason.NOT_CONFIRMED:
            continue  # the batchers' own sweep: no one awaits the answer
        if isinstance(result, Refused):
            out.replies.append(error(void.key, void.counter, *result))
            continue
        day = counter.today(now)
        out.replies.append(
            Reply(void.key, void.counter, ask.first, ask.last, counter.template, day)
        )
    return made


async def _confirm(
    tx: FrameTransaction,
    confirms: Sequence[tuple[Confirm, Counter, str]],
    keep: float,
    now: datetime,
    out: Outcome,
) -> list[ConfirmAsk]:
    """Record the frame's confirmations in its transaction, answering each; the new ones."""
    asks: list[ConfirmAsk] = []
    for confirm, counter, period in confirms:
        if not counter.confirm:
            detail = f"counter {counter.name!r} was not created to take confirmations"
            out.replies.append(
                error(confirm.key, confirm.counter, ReplyError.NOT_CONFIRMABLE, detail)
            )
            continue
        keep_s = counter.keeping(keep).keep_s
        ask = ConfirmAsk(
            counter.name, period, confirm.first, confirm.last, confirm.who, counter.start, keep_s
        )
        asks.append(ask)
    made = []
    takers = [c for c in confirms if c[1].confirm]
    for ask, (confirm, counter, _), result in zip(
        asks, takers, await tx.confirm(asks), strict=True
    ):
        if isinstance(result, Refused):
            out.replies.append(error(confirm.key, confirm.counter, *result))
            continue
        if result:
            made.append(ask)
        day = counter.today(now)
        out.replies.append(
            Reply(confirm.key, confirm.counter, ask.first, ask.last, counter.template, day)
        )
    return made


@dataclass
class Handed:
    """What splitting a frame's allocated ranges among its takers gives (`hand_out`)."""

    replies: list[Reply] = field(default_factory=list)
    taken: list[tuple[str, Span]] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    """The keyed takers' claims, to remember under their Idempotency-Keys."""
    ranges: list[Span] = field(default_factory=list)
    """Each (counter, period)'s whole range this frame: the audit rows'."""
    allocated: int = 0


def hand_out(
    takers: Sequence[Live],
    wanted: Mapping[tuple[str, str], list[int]],
    totals: Mapping[tuple[str, str], int],
    counters: Mapping[str, Counter],
) -> Handed:
    """Split each (counter, period)'s allocated range among its takers in arrival order (pure):
    `totals` are the values each has allocated in all, after this frame's delta."""
    ranges: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for (name, period), counts in wanted.items():
        ranges[(name, period)] = split(counters[name].start, totals[(name, period)], counts)
    out = Handed(ranges=[Span(n, p, r[0][0], r[-1][1]) for (n, p), r in ranges.items()])
    cursors = {k: iter(r) for k, r in ranges.items()}
    for one in takers:
        record, counter = one.record, one.counter
        first, last = next(cursors[(counter.name, one.period)])
        out.allocated += record.count
        out.replies.append(
            Reply(record.key, record.counter, first, last, counter.template, one.day)
        )
        out.taken.append((record.key, Span(counter.name, one.period, first, last)))
        if record.idempotency_key:
            out.claims.append(
                Claim(
                    counter.name,
                    record.idempotency_key,
                    record.count,
                    first,
                    last,
                    one.day,
                    record.key,
                )
            )
    return out


def _replayed(entry: Entry, earlier: Mapping[str, Reply]) -> Reply:
    assert entry.key is not None
    kept = earlier.get(entry.key)
    if kept is not None:
        return kept
    counter = entry.record.counter if entry.record is not None else ""
    return error(
        entry.key,
        counter,
        ReplyError.EXPIRED,
        "this record was applied before and its reply is no longer kept; nothing allocated now",
    )


def _raw(entry: Entry) -> bytes:
    if entry.raw:
        return entry.raw
    assert entry.record is not None
    return encode(entry.record)
