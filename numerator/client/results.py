"""What the client's calls answer, read from the service's JSON: `Values` (and each `Value`)
from `next`, `CounterInfo` from `create`, `get` and `counters`, `Marked` from `void` and
`confirm`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Value:
    value: int
    formatted: str


@dataclass(frozen=True, slots=True)
class Values:
    """What `next` took: `values` in order; `value` and `formatted` are the first's (the only
    one's, for count=1); `idempotency_key` is the key a retry of this call sends."""

    counter: str
    values: tuple[Value, ...]
    idempotency_key: str

    @property
    def value(self) -> int:
        return self.values[0].value

    @property
    def formatted(self) -> str:
        return self.values[0].formatted

    @property
    def first(self) -> int:
        return self.values[0].value

    @property
    def last(self) -> int:
        return self.values[-1].value

    @classmethod
    def from_json(cls, body: dict[str, Any], key: str) -> Values:
        if "values" in body:
            values = tuple(Value(v["value"], v["formatted"]) for v in body["values"])
        else:
            values = (Value(body["value"], body["formatted"]),)
        return cls(body["counter"], values, key)


@dataclass(frozen=True, slots=True)
class CounterInfo:
    """A counter's settings; `value` and `period`, the last value handed out in the current
    period (None before the first), where the service said them (`get`)."""

    name: str
    template: str = "{value}"
    start: int = 1
    reset: str = "never"
    timezone: str = "UTC"
    retention_days: int | None = None
    confirm: str = "none"
    value: int | None = None
    period: str | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> CounterInfo:
        return cls(
            body["name"],
            body["template"],
            body["start"],
            body["reset"],
            body["timezone"],
            body.get("retention_days"),
            body.get("confirm", "none"),
            body.get("value"),
            body.get("period"),
        )


@dataclass(frozen=True, slots=True)
class Marked:
    """What `void` or `confirm` did: the ranges (first, last) of `counter` in `period`."""

    counter: str
    period: str
    ranges: tuple[tuple[int, int], ...]
    reason: str | None = None

    @classmethod
    def reader(cls, what: str) -> Callable[[dict[str, Any]], Marked]:
        def read(body: dict[str, Any]) -> Marked:
            ranges = tuple((r["first"], r["last"]) for r in body[what])
            return cls(body["counter"], body["period"], ranges, body.get("reason"))

        return read
