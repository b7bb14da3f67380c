"""The wire format: a record on the stream (a demand for values) and a reply (its answer).

The edge and the batcher meet only here. In memory the objects travel as they are; on Kinesis and
DynamoDB they travel as the JSON that `encode` writes and `decode_*` reads.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from enum import Enum
from typing import Any

import orjson

MAX_COUNT = 1000
"""The most values one request may ask for."""
MAX_RECORD_COUNT = 1_000_000
"""The most values one record may ask for: a front frame's record sums its requests' counts."""
VERSION = 1
"""The wire version every record and reply carries as `v`. A reader meets a version it does not
know as a poison record (dead-lettered) or a bad reply (502), never as a crash."""


# Reply keys: unique across processes (the prefix) and within one (the sequence), cheap to make.
# Drawn again in every child a fork makes: granian forks its workers from a process that has
# imported this module, and two workers with one prefix wrote each other's replies (the same
# keys in one reply table) and answered as one edge.
_PREFIX = ""
_SEQUENCE = itertools.count(1)
_GROUPED = False
GROUPED_MARK = "g"
"""The first letter of a long-running edge's prefix (a hex digit never is): the batcher leaves
its replies in one item per frame for the edge to read together, not one item per record."""


def _draw() -> None:
    global _PREFIX, _SEQUENCE
    _PREFIX = (GROUPED_MARK if _GROUPED else "") + uuid.uuid4().hex[: 16 - _GROUPED]
    _SEQUENCE = itertools.count(1)


def read_grouped() -> None:
    """This process (and the children it forks) reads its replies a frame at a time: called by
    a long-running edge on the AWS path before it makes its first reply key."""
    global _GROUPED
    if not _GROUPED:
        _GROUPED = True
        _draw()


def new_edge() -> str:
    """Make this process a new edge, with reply keys of a new prefix; its new edge id. A worker
    that lost the machine's batcher with replies owed (infra/adapters/hub.py) leaves its old edge
    to be taken for dead: the ledger lists what was issued to it since its last mark `unsure`."""
    _draw()
    return _PREFIX


def grouped(key: str) -> bool:
    """Whether reply key `key` is awaited by an edge that reads its replies a frame at a time."""
    return key.startswith(GROUPED_MARK)


_draw()
os.register_at_fork(after_in_child=_draw)


def reply_key() -> str:
    """A new record's reply key (an edge's own record, or a front frame's)."""
    return f"{_PREFIX}-{next(_SEQUENCE)}"


def edge_id() -> str:
    """This process's edge, as the audit trail and the `edges` table name it: the prefix of the
    reply keys it makes, its own in every process."""
    return _PREFIX


def edge_of_key(key: str) -> str:
    """The edge that made reply key `key` ('' for a key of another shape)."""
    edge, dash, _ = key.rpartition("-")
    return edge if dash else ""


class ReplyError(Enum):
    """Why a record got no values: a closed set, so that a reply written by one version of the
    batcher is read the same by every edge. The edge maps each to an HTTP problem in one table
    (functions/problems.py: REPLY_PROBLEMS)."""

    COUNTER_NOT_FOUND = "counter-not-found"
    IDEMPOTENCY_KEY_REUSED = "idempotency-key-reused"
    BAD_RECORD = "bad-record"
    EXPIRED = "expired"
    UNAVAILABLE = "unavailable"
    NOT_ISSUED = "not-issued"
    ALREADY_VOID = "already-void"
    NOT_CONFIRMABLE = "not-confirmable"
    REWOUND = "rewound"
    """The counter is below values already handed out (Postgres forgot commits): refused
    until an operator mends it."""


class BadReply(ValueError):
    """A reply this edge cannot read (unknown version or error, missing fields): answered 502."""


class BadRecord(ValueError):
    """A record that cannot be read: it goes to the dead-letter table, the shard moves on."""

    def __init__(self, problem: str, key: str | None = None) -> None:
        super().__init__(problem)
        self.key = key


# Record and Reply are made for every request, so they are plain slotted classes: a frozen
# dataclass's __init__ costs four times as much. Treat them as values all the same.
@dataclass(slots=True)
class Record:
    """One demand: `count` consecutive values of `counter`, answered under `key`.

    `deadline` (Unix seconds) is when the client stops waiting: a record read after it is
    answered 'expired' and allocates nothing, so a late frame never leaves a gap. `sent` is when
    the edge put it, for the batcher's lag.
    """

    key: str
    counter: str
    count: int = 1
    idempotency_key: str | None = None
    deadline: float = 0.0
    sent: float = 0.0
    who: str | list[list[Any]] = ""
    """Who asked, for the audit trail: an API key (`key:ID`) or a client address; a front
    frame's record says it for each run of its requests, [[count, who], ...] in order."""
    to: str = ""
    """Where its edge takes its reply pushed (infra/adapters/push.py): "host:port", or ""
    (the Lambda edge, the embedded path): then the reply table alone. An address only: the key
    a push is signed with never travels in a record."""
    trace: str = ""
    """The W3C `traceparent` of the trace span that put it ("00-<trace>-<span>-<flags>"), when
    the edge traces (infra/observe/traces.py): the batcher's frame links to it. "" (and no
    field on the wire) when it does not."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "v": VERSION,
            "k": self.key,
            "c": self.counter,
            "n": self.count,
            "d": self.deadline,
            "s": self.sent,
        }
        if self.idempotency_key is not None:
            out["i"] = self.idempotency_key
        if self.who:
            out["w"] = self.who
        if self.to:
            out["t"] = self.to
        if self.trace:
            out["tp"] = self.trace
        return out

    @classmethod
    def from_json(cls, data: object) -> Record:
        if not isinstance(data, dict):
            raise BadRecord("record is not a JSON object")
        version = data.get("v", VERSION)
        if version != VERSION:
            raise BadRecord(f"unknown wire version {version!r} (this batcher reads {VERSION})")
        key = data.get("k")
        if not isinstance(key, str) or not key:
            raise BadRecord("record has no reply key")
        counter, count, idem = data.get("c"), data.get("n"), data.get("i")
        deadline, sent = data.get("d"), data.get("s", 0.0)
        if not isinstance(counter, str) or not counter:
            raise BadRecord("record has no counter", key)
        if (
            not isinstance(count, int)
            or isinstance(count, bool)
            or not 1 <= count <= MAX_RECORD_COUNT
        ):
            raise BadRecord(f"count must be an integer from 1 to {MAX_RECORD_COUNT}", key)
        if idem is not None and not isinstance(idem, str):
            raise BadRecord("idempotency key must be a string", key)
        deadline, sent = _times(data, key)
        who = data.get("w", "")
        if not isinstance(who, str | list):
            raise BadRecord("who must be a string or a list of [count, who]", key)
        to = data.get("t", "")  # one that names no inbox is answered through the table alone
        to = to if isinstance(to, str) else ""
        trace = data.get("tp", "")  # a record from an edge that does not trace has none
        trace = trace if isinstance(trace, str) else ""
        return cls(key, counter, count, idem, deadline, sent, who, to, trace)


def _times(data: dict[str, Any], key: str) -> tuple[float, float]:
    deadline, sent = data.get("d"), data.get("s", 0.0)
    for field, number in (("deadline", deadline), ("sent", sent)):
        if not isinstance(number, int | float) or isinstance(number, bool):
            raise BadRecord(f"{field} must be a number", key)
    assert isinstance(deadline, int | float) and isinstance(sent, int | float)
    return float(deadline), float(sent)


MAX_VOID = 100_000
"""The most values one void may take out of use."""
MAX_VALUE = 2**63 - 1
"""The largest value Postgres holds (bigint): a void or confirmation past it names no value."""


@dataclass(slots=True)
class Void:
    """A demand to take values out of use: [first, last] of `counter` in `period` (None: the
    period the batcher's clock puts the counter in), for `reason`. Answered under `key` with
    the range (a void already made the same way answers the same: idempotent) or an error."""

    key: str
    counter: str
    first: int
    last: int
    reason: str
    period: str | None = None
    who: str = ""
    deadline: float = 0.0
    sent: float = 0.0
    day: date | None = None
    """With no period: the day the values were allocated on, whose period they are in (what
    an edge knows of values it could not deliver)."""

    @property
    def idempotency_key(self) -> None:
        return None

    def to_json(self) -> dict[str, Any]:
        return _marking(self, "void", {"r": self.reason})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Void:
        key, counter, first, last = _span(data)
        reason = data.get("r")
        if not isinstance(reason, str) or not reason:
            raise BadRecord("a void needs a reason", key)
        period, who, deadline, sent, day = _where(data, key)
        return cls(key, counter, first, last, reason, period, who, deadline, sent, day)


def _span(data: dict[str, Any]) -> tuple[str, str, int, int]:
    """A void's or a confirmation's reply key, counter and values, checked."""
    key = data.get("k")
    if not isinstance(key, str) or not key:
        raise BadRecord("void has no reply key")
    counter, first, last = data.get("c"), data.get("f"), data.get("l")
    if not isinstance(counter, str) or not counter:
        raise BadRecord("void has no counter", key)
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (first, last)):
        raise BadRecord("a void's first and last must be integers", key)
    assert isinstance(first, int) and isinstance(last, int)
    if not 0 <= first <= last <= MAX_VALUE:
        raise BadRecord(f"a void's values must be 0 to {MAX_VALUE}, first to last", key)
    if not 0 <= last - first < MAX_VOID:
        raise BadRecord(f"a void takes 1 to {MAX_VOID} values, first to last", key)
    return key, counter, first, last


def _where(data: dict[str, Any], key: str) -> tuple[str | None, str, float, float, date | None]:
    """A void's or a confirmation's period, who asked, times and day, checked."""
    period, who = data.get("p"), data.get("w", "")
    if period is not None and not isinstance(period, str):
        raise BadRecord("a void's period must be a string", key)
    if not isinstance(who, str):
        raise BadRecord("who must be a string", key)
    deadline, sent = _times(data, key)
    try:
        day = date.fromisoformat(data["y"]) if "y" in data else None
    except (TypeError, ValueError):
        raise BadRecord("a void's day must be an ISO date", key) from None
    return period, who, deadline, sent, day


@dataclass(slots=True)
class Confirm:
    """A client says it used values [first, last] of a counter that needs confirmation: they
    are final, never voided not-confirmed. Answered like a void (idempotent); a void's fields
    but a reason."""

    key: str
    counter: str
    first: int
    last: int
    period: str | None = None
    who: str = ""
    deadline: float = 0.0
    sent: float = 0.0
    day: date | None = None

    @property
    def idempotency_key(self) -> None:
        return None

    def to_json(self) -> dict[str, Any]:
        return _marking(self, "confirm", {})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Confirm:
        key, counter, first, last = _span(data)
        period, who, deadline, sent, day = _where(data, key)
        return cls(key, counter, first, last, period, who, deadline, sent, day)


@dataclass(slots=True)
class Cancel:
    """The edge gave up on the request of record `key` (a reply timeout, its client gone): if
    that record is not applied yet, it allocates nothing; if it is, its values are void,
    `abandoned`. It goes to the record's shard: the same counter and partition basis."""

    key: str
    counter: str
    idempotency_key: str | None = None
    who: str = ""
    deadline: float = 0.0
    sent: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"v": VERSION, "o": "cancel", "k": self.key, "c": self.counter}
        if self.idempotency_key is not None:
            out["i"] = self.idempotency_key
        if self.who:
            out["w"] = self.who
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cancel:
        key, counter, idem, who = data.get("k"), data.get("c"), data.get("i"), data.get("w", "")
        if not isinstance(key, str) or not key:
            raise BadRecord("cancel has no reply key")
        if not isinstance(counter, str) or not counter:
            raise BadRecord("cancel has no counter", key)
        if (idem is not None and not isinstance(idem, str)) or not isinstance(who, str):
            raise BadRecord("a cancel's idempotency key and who must be strings", key)
        return cls(key, counter, idem, who)


Demand = Record | Void | Confirm | Cancel
"""What the edge puts on the stream."""


@dataclass(slots=True)
class Reply:
    """The answer to one record: a range [first, last] with what it takes to render it, or an error.

    `error` says why there are no values (a ReplyError), with `detail` for people;
    `day` is the allocation's calendar day in the counter's time zone, for the template's dates.
    """

    key: str
    counter: str
    first: int = 0
    last: int = 0
    template: str = "{value}"
    day: date | None = None
    error: ReplyError | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {
                "v": VERSION,
                "k": self.key,
                "c": self.counter,
                "e": self.error.value,
                "m": self.detail,
            }
        assert self.day is not None
        return {
            "v": VERSION,
            "k": self.key,
            "c": self.counter,
            "f": self.first,
            "l": self.last,
            "t": self.template,
            "y": self.day.isoformat(),
        }

    @classmethod
    def from_json(cls, data: object) -> Reply:
        if not isinstance(data, dict):
            raise BadReply("reply is not a JSON object")
        version = data.get("v", VERSION)
        if version != VERSION:
            raise BadReply(f"unknown wire version {version!r} (this edge reads {VERSION})")
        try:
            if "e" in data:
                return cls(
                    key=str(data["k"]),
                    counter=str(data["c"]),
                    error=ReplyError(data["e"]),
                    detail=str(data.get("m", "")),
                )
            return cls(
                key=str(data["k"]),
                counter=str(data["c"]),
                first=int(data["f"]),
                last=int(data["l"]),
                template=str(data["t"]),
                day=date.fromisoformat(data["y"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BadReply(f"unreadable reply: {exc!r}") from exc


def encode(item: Demand | Reply) -> bytes:
    return orjson.dumps(item.to_json())


def decode_record(raw: bytes) -> Demand:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRecord(f"record is not JSON: {exc}") from exc
    kind = data.get("o") if isinstance(data, dict) and data.get("v", VERSION) == VERSION else None
    if kind == "void":
        return Void.from_json(data)
    if kind == "confirm":
        return Confirm.from_json(data)
    if kind == "cancel":
        return Cancel.from_json(data)
    return Record.from_json(data)


def bounded(lines: Sequence[bytes], limit: int) -> list[list[bytes]]:
    """`lines` in order, in runs whose lines with a newline between them take at most `limit`
    bytes (a line longer than that alone): replies joined into a reply item or a datagram."""
    out: list[list[bytes]] = []
    size = 0
    for line in lines:
        if not out or size + len(line) + 1 > limit:
            out.append([])
            size = 0
        out[-1].append(line)
        size += len(line) + 1
    return out


def decode_reply(raw: bytes) -> Reply:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadReply(f"reply is not JSON: {exc}") from exc
    return Reply.from_json(data)


def _marking(mark: Void | Confirm, op: str, extra: dict[str, Any]) -> dict[str, Any]:
    """A void's or a confirmation's JSON: the fields they share, `extra` after the range."""
    out: dict[str, Any] = {
        "v": VERSION, "o": op, "k": mark.key, "c": mark.counter, "f": mark.first, "l": mark.last,
        **extra, "d": mark.deadline, "s": mark.sent,
    }  # fmt: skip
    if mark.period is not None:
        out["p"] = mark.period
    if mark.day is not None:
        out["y"] = mark.day.isoformat()
    if mark.who:
        out["w"] = mark.who
    return out
