"""The wire format: a record on the stream (a demand for values) and a reply (its answer).

The edge and the batcher meet only here. In memory the objects travel as they are; on Kinesis and
DynamoDB they travel as the JSON that `encode` writes and `decode_*` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

import orjson

MAX_COUNT = 1000


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

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "k": self.key,
            "c": self.counter,
            "n": self.count,
            "d": self.deadline,
            "s": self.sent,
        }
        if self.idempotency_key is not None:
            out["i"] = self.idempotency_key
        return out

    @classmethod
    def from_json(cls, data: object) -> Record:
        if not isinstance(data, dict):
            raise BadRecord("record is not a JSON object")
        key = data.get("k")
        if not isinstance(key, str) or not key:
            raise BadRecord("record has no reply key")
        counter, count, idem = data.get("c"), data.get("n"), data.get("i")
        deadline, sent = data.get("d"), data.get("s", 0.0)
        if not isinstance(counter, str) or not counter:
            raise BadRecord("record has no counter", key)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_COUNT:
            raise BadRecord(f"count must be an integer from 1 to {MAX_COUNT}", key)
        if idem is not None and not isinstance(idem, str):
            raise BadRecord("idempotency key must be a string", key)
        for field, number in (("deadline", deadline), ("sent", sent)):
            if not isinstance(number, int | float) or isinstance(number, bool):
                raise BadRecord(f"{field} must be a number", key)
        assert isinstance(deadline, int | float) and isinstance(sent, int | float)
        return cls(key, counter, count, idem, float(deadline), float(sent))


@dataclass(slots=True)
class Reply:
    """The answer to one record: a range [first, last] with what it takes to render it, or an error.

    `error` is a stable problem type ('counter-not-found', 'expired', 'unavailable', ...);
    `day` is the allocation's calendar day in the counter's time zone, for the template's dates.
    """

    key: str
    counter: str
    first: int = 0
    last: int = 0
    template: str = "{value}"
    day: date | None = None
    error: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"k": self.key, "c": self.counter, "e": self.error, "m": self.detail}
        assert self.day is not None
        return {
            "k": self.key,
            "c": self.counter,
            "f": self.first,
            "l": self.last,
            "t": self.template,
            "y": self.day.isoformat(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reply:
        if "e" in data:
            return cls(key=data["k"], counter=data["c"], error=data["e"], detail=data.get("m", ""))
        return cls(
            key=data["k"],
            counter=data["c"],
            first=int(data["f"]),
            last=int(data["l"]),
            template=data["t"],
            day=date.fromisoformat(data["y"]),
        )


def encode(item: Record | Reply) -> bytes:
    return orjson.dumps(item.to_json())


def decode_record(raw: bytes) -> Record:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRecord(f"record is not JSON: {exc}") from exc
    return Record.from_json(data)


def decode_reply(raw: bytes) -> Reply:
    return Reply.from_json(orjson.loads(raw))
