"""What a frame's values become (pure): who takes new values and who shares a keyed answer, one
delta per (counter, period), each taker's range split from what the store returned, the periods
refused below their floor, the voids and confirmations asked and answered, and the audit rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from batcher.classify import ConfirmAsked, Live, VoidAsked, error
from infra.counters import Counter
from infra.ledger import VoidReason
from infra.ports import Audit, Claim, ConfirmAsk, Holder, Made, NotMade, VoidAsk
from infra.spans import Run, Span
from infra.wire import Cancel, Reply, ReplyError, edge_of_key


def split(start: int, total: int, counts: Sequence[int]) -> list[tuple[int, int]]:
    """Ranges for `counts` taken in order from the last sum(counts) of `total` allocated values
    of a period whose first value is `start`."""
    cursor = start + total - sum(counts)
    ranges = []
    for count in counts:
        ranges.append((cursor, cursor + count - 1))
        cursor += count
    return ranges


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


class Taking(NamedTuple):
    """What one record took: its reply `key` (what its cancel names) and its `span`."""

    key: str
    span: Span


@dataclass
class Handed:
    """What splitting a frame's allocated ranges among its takers gives (`hand_out`)."""

    replies: list[Reply] = field(default_factory=list)
    taken: list[Taking] = field(default_factory=list)
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
        out.taken.append(Taking(record.key, Span(counter.name, one.period, first, last)))
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


@dataclass(frozen=True)
class Refusal:
    """The takers of periods the store would not add to (`refuse`), answered `rewound`; the
    takers and demand left."""

    takers: list[Live]
    wanted: dict[tuple[str, str], list[int]]
    replies: list[Reply] = field(default_factory=list)
    rewound: dict[tuple[str, str], int] = field(default_factory=dict)
    """Each period refused, with its floor (the applier says so, once)."""


def refuse(
    takers: Sequence[Live],
    wanted: Mapping[tuple[str, str], list[int]],
    totals: Mapping[tuple[str, str], int],
    floors: Mapping[tuple[str, str], int],
) -> Refusal:
    """Answer the takers of periods the store would not add to (their `counter_values` row is
    below the floor: values the audit trail holds, or this batcher handed out, or a rewind
    recorded) with a refusal (pure)."""
    refused = {pair for pair in wanted if pair not in totals}
    if not refused:
        return Refusal(list(takers), dict(wanted))
    rewound = {pair: floors.get(pair, 0) for pair in refused}
    replies = []
    for one in takers:
        pair = (one.counter.name, one.period)
        if pair in refused:
            why = (
                f"counter {pair[0]!r} period {pair[1]!r} is below {rewound[pair]}, a value "
                "already handed out (Postgres forgot commits, or counter_values was moved "
                "back): refused, so that none is handed out twice, until an operator runs "
                "`numerator counters mend` (see numerator audit verify)"
            )
            replies.append(error(one.record.key, pair[0], ReplyError.REWOUND, why))
    left = [one for one in takers if (one.counter.name, one.period) not in refused]
    kept = {k: v for k, v in wanted.items() if k not in refused}
    return Refusal(left, kept, replies, rewound)


def void_asks(voids: Sequence[VoidAsked], keep: float) -> list[VoidAsk]:
    """The voids records asked for, as the frame's transaction makes them (pure)."""
    return [
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


@dataclass(frozen=True)
class VoidsMade:
    """What became of a frame's voids: those newly made (the abandoned ones first, as the
    audit row lists them), the answers to the records that asked, and how many values were
    voided abandoned."""

    made: list[VoidAsk]
    replies: list[Reply]
    abandoned: int


def voided(
    voids: Sequence[VoidAsked],
    asks: Sequence[VoidAsk],
    abandoned: Sequence[VoidAsk],
    results: Sequence[Made],
    now: datetime,
) -> VoidsMade:
    """The voids made, from the store's `results` for `[*asks, *abandoned]` (pure): each asked
    for answered (an abandoned one has no one to answer, nor the batchers' own sweep)."""
    gone = results[len(asks) :]
    made = [ask for ask, result in zip(abandoned, gone, strict=True) if result is True]
    values = sum(ask.last - ask.first + 1 for ask in made)
    replies = []
    for ask, (void, counter, _), result in zip(asks, voids, results, strict=False):
        if result is True:
            made.append(ask)
        if void.reason == VoidReason.NOT_CONFIRMED:
            continue  # the batchers' own sweep: no one awaits the answer
        if isinstance(result, NotMade):
            replies.append(error(void.key, void.counter, *result))
            continue
        day = counter.today(now)
        replies.append(Reply(void.key, void.counter, ask.first, ask.last, counter.template, day))
    return VoidsMade(made, replies, values)


@dataclass(frozen=True)
class Confirming:
    """A frame's confirmations as its transaction records them (`confirming`): those of
    counters that take confirmations with their asks, and the answers to the others."""

    asked: list[ConfirmAsked]
    asks: list[ConfirmAsk]
    refused: list[Reply]


def confirming(confirms: Sequence[ConfirmAsked], keep: float) -> Confirming:
    """Which confirmations to record (pure): a counter not created to take them refuses."""
    asked, asks, refused = [], [], []
    for confirm, counter, period in confirms:
        if not counter.confirm:
            detail = f"counter {counter.name!r} was not created to take confirmations"
            refused.append(error(confirm.key, confirm.counter, ReplyError.NOT_CONFIRMABLE, detail))
            continue
        keep_s = counter.keeping(keep).keep_s
        asked.append(ConfirmAsked(confirm, counter, period))
        asks.append(
            ConfirmAsk(
                counter.name,
                period,
                confirm.first,
                confirm.last,
                confirm.who,
                counter.start,
                keep_s,
            )
        )
    return Confirming(asked, asks, refused)


@dataclass(frozen=True)
class ConfirmationsMade:
    """What became of a frame's confirmations: those newly recorded, and every answer."""

    made: list[ConfirmAsk]
    replies: list[Reply]


def confirmed(confirms: Confirming, results: Sequence[Made], now: datetime) -> ConfirmationsMade:
    """The confirmations recorded, from the store's `results` for `confirms.asks` (pure)."""
    made, replies = [], list(confirms.refused)
    for ask, (confirm, counter, _), result in zip(
        confirms.asks, confirms.asked, results, strict=True
    ):
        if isinstance(result, NotMade):
            replies.append(error(confirm.key, confirm.counter, *result))
            continue
        if result:
            made.append(ask)
        day = counter.today(now)
        replies.append(
            Reply(confirm.key, confirm.counter, ask.first, ask.last, counter.template, day)
        )
    return ConfirmationsMade(made, replies)
