"""Allocation: turn one frame's records into one delta per (counter, period), apply them in one
transaction, and split the returned ranges among the records in the order they arrived."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime

import orjson

from infra.counters import Counter
from infra.ports import Claim, DeadLetter, Entry, Lease, Store
from infra.wire import Record, Reply, ReplyError, encode


@dataclass
class Outcome:
    replies: list[Reply] = field(default_factory=list)
    allocated: int = 0
    dead_letters: int = 0
    expired: int = 0
    replays: int = 0
    held: int | None = None
    """The id under which the frame's replies are kept until published (durable streams)."""


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


async def apply(
    entries: Sequence[Entry],
    counters: dict[str, Counter],
    store: Store,
    lease: Lease,
    now: datetime,
    wall: float,
    retention: float,
    hold: bool = False,
    published: Sequence[int] = (),
    earlier: dict[str, Reply] | None = None,
) -> Outcome:
    """Apply one frame. `counters` holds the definitions of every counter the frame names that
    exists; `now` decides periods, `wall` (Unix seconds) decides which records have expired.

    On a durable stream, with `hold`, the frame's replies are kept in the same transaction (for
    a republish after a crash, and for replays); `published` names earlier held replies that have
    been published, marked in the same transaction. Entries at or below `lease.applied` are
    replays: answered from `earlier` (their kept replies, by reply key), never allocated again."""
    out = Outcome()
    letters: list[DeadLetter] = []
    live: list[tuple[Record, Counter, str, date]] = []
    periods: dict[str, tuple[str, date]] = {}  # per counter, once per frame, not per record
    days: dict[str, date] = {}  # per time zone: a frame over many counters has few zones
    applied = lease.applied
    for entry in entries:
        if applied is not None and int(entry.sequence) <= applied:
            out.replays += 1
            if entry.key:
                out.replies.append(_replayed(entry, earlier or {}))
            continue
        record = entry.record
        if record is None:
            letters.append(
                DeadLetter(lease.stream, entry.shard, entry.sequence, entry.problem, entry.raw)
            )
            if entry.key:
                out.replies.append(error(entry.key, "", ReplyError.BAD_RECORD, entry.problem))
            continue
        if record.deadline and record.deadline < wall:
            out.expired += 1
            out.replies.append(
                error(
                    record.key,
                    record.counter,
                    ReplyError.EXPIRED,
                    "the request's deadline passed before its frame",
                )
            )
            continue
        counter = counters.get(record.counter)
        if counter is None:
            problem = f"no counter named {record.counter!r}"
            letters.append(
                DeadLetter(lease.stream, entry.shard, entry.sequence, problem, _raw(entry))
            )
            out.replies.append(
                error(record.key, record.counter, ReplyError.COUNTER_NOT_FOUND, problem)
            )
            continue
        if counter.name not in periods:
            day = days.get(counter.timezone)
            if day is None:
                day = days[counter.timezone] = counter.today(now)
            periods[counter.name] = (counter.reset.period(day), day)
        period, day = periods[counter.name]
        live.append((record, counter, period, day))

    keyed = {(r.counter, r.idempotency_key) for r, *_ in live if r.idempotency_key is not None}
    if live and not keyed and not letters and not hold and not published:
        # A plain frame (the embedded path's usual one): ONE statement, its own transaction.
        # At low load each round trip wakes Postgres and this process in turn; four of them
        # (BEGIN, allocate, checkpoint, COMMIT) were most of a lone request's time.
        demand: dict[tuple[str, str], list[int]] = {}
        for record, counter, period, _ in live:
            demand.setdefault((counter.name, period), []).append(record.count)
        plain = [(n, p, sum(c), counters[n].start) for (n, p), c in demand.items()]
        totals = await store.allocate_plain(lease, entries[-1].sequence, plain)
        _hand_out(live, demand, totals, counters, out)
        return out
    async with store.frame() as tx:
        found = await tx.claims(list(keyed)) if keyed else {}
        demand = {}
        takers: list[tuple[Record, Counter, str, date]] = []
        sharers: list[tuple[Record, Counter]] = []
        first_taker: set[tuple[str, str]] = set()
        for record, counter, period, day in live:
            if record.idempotency_key:
                key = (record.counter, record.idempotency_key)
                if key in found or key in first_taker:
                    sharers.append((record, counter))
                    continue
                first_taker.add(key)
            demand.setdefault((counter.name, period), []).append(record.count)
            takers.append((record, counter, period, day))

        totals = await tx.allocate({k: sum(v) for k, v in demand.items()}) if demand else {}
        claims, audit = _hand_out(takers, demand, totals, counters, out)
        for claim in claims:
            found[(claim.counter, claim.key)] = claim
        for record, counter in sharers:
            assert record.idempotency_key is not None
            claim = found[(record.counter, record.idempotency_key)]
            if claim.count != record.count:
                out.replies.append(
                    error(
                        record.key,
                        record.counter,
                        ReplyError.IDEMPOTENCY_KEY_REUSED,
                        f"this Idempotency-Key was first used with count={claim.count}",
                    )
                )
            else:
                out.replies.append(
                    Reply(
                        record.key,
                        record.counter,
                        claim.first,
                        claim.last,
                        counter.template,
                        claim.day,
                    )
                )
        await tx.remember(claims, retention)
        await tx.dead_letter(letters)
        await tx.checkpoint(lease, entries[-1].sequence, audit)
        await tx.published(published)
        if hold:
            out.held = await tx.hold(
                lease, entries[0].sequence, entries[-1].sequence, encode_replies(out.replies)
            )
    out.dead_letters = len(letters)
    return out


def _hand_out(
    takers: Sequence[tuple[Record, Counter, str, date]],
    demand: dict[tuple[str, str], list[int]],
    totals: dict[tuple[str, str], int],
    counters: dict[str, Counter],
    out: Outcome,
) -> tuple[list[Claim], list[tuple[str, str, int, int]]]:
    """Split each counter's allocated range among its takers in arrival order, into `out`'s
    replies; the claims of the keyed takers, and the frame's audit ranges."""
    ranges: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for (name, period), counts in demand.items():
        ranges[(name, period)] = split(counters[name].start, totals[(name, period)], counts)
    audit = [(n, p, r[0][0], r[-1][1]) for (n, p), r in ranges.items()]
    cursors = {k: iter(r) for k, r in ranges.items()}
    claims: list[Claim] = []
    for record, counter, period, day in takers:
        first, last = next(cursors[(counter.name, period)])
        out.allocated += record.count
        out.replies.append(Reply(record.key, record.counter, first, last, counter.template, day))
        if record.idempotency_key:
            claims.append(
                Claim(counter.name, record.idempotency_key, record.count, first, last, day)
            )
    return claims, audit


def _replayed(entry: Entry, earlier: dict[str, Reply]) -> Reply:
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
