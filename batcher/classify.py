"""A frame's entries sorted by what becomes of them (pure): replays, dead letters, expired
records, voids and confirmations asked for, cancels, and the live records that take values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import NamedTuple

from infra.counters import Counter
from infra.ports import DeadLetter, Entry, Lease
from infra.wire import Cancel, Confirm, Record, Reply, ReplyError, Void, encode


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


class VoidAsked(NamedTuple):
    """A void a record asks for, with its counter and the period it names (`asked`)."""

    void: Void
    counter: Counter
    period: str


class ConfirmAsked(NamedTuple):
    """A confirmation a record asks for, with its counter and the period it names."""

    confirm: Confirm
    counter: Counter
    period: str


@dataclass
class Classified:
    """A frame's entries sorted by what becomes of them (`classify`): answered without any
    allocation (replays, poison records, expired ones, unknown counters), or `live`."""

    live: list[Live] = field(default_factory=list)
    voids: list[VoidAsked] = field(default_factory=list)
    confirms: list[ConfirmAsked] = field(default_factory=list)
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
            self.replies.append(replayed(entry, earlier))

    def unreadable(self, entry: Entry, stream: str) -> None:
        """A record that does not decode: a dead letter, answered if its reply key was read."""
        self.letters.append(
            DeadLetter(stream, entry.shard, entry.sequence, entry.problem, entry.raw)
        )
        if entry.key:
            self.replies.append(error(entry.key, "", ReplyError.BAD_RECORD, entry.problem))

    def expire(self, record: Record | Void | Confirm) -> None:
        self.expired += 1
        detail = "the request's deadline passed before its frame"
        self.replies.append(error(record.key, record.counter, ReplyError.EXPIRED, detail))

    def unknown(self, entry: Entry, record: Record | Void | Confirm, stream: str) -> None:
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
        elif isinstance(record, Void):
            counter = counters[record.counter]
            out.voids.append(VoidAsked(record, counter, asked(record, counter, now)))
        elif isinstance(record, Confirm):
            counter = counters[record.counter]
            out.confirms.append(ConfirmAsked(record, counter, asked(record, counter, now)))
        else:
            counter = counters[record.counter]
            out.live.append(Live(record, counter, *periods.of(counter)))
    return out


def asked(mark: Void | Confirm, counter: Counter, now: datetime) -> str:
    """The period a void (or a confirmation) names: its own, its day's, else the current one."""
    if mark.period is not None:
        return mark.period
    if mark.day is not None:
        return counter.reset.period(mark.day)
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


def replayed(entry: Entry, earlier: Mapping[str, Reply]) -> Reply:
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
