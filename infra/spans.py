"""The shapes the audit trail holds: a span of values a frame handed out, and a run of who took
them. Both are written into the hashed audit rows as JSON arrays, in these fields' order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple


class Span(NamedTuple):
    """Values `first` to `last` of a counter's period (`period` "" for a counter that never
    resets), handed out together: an audit row's range, a record's take."""

    counter: str
    period: str
    first: int
    last: int


def outside(spans: Iterable[Span], holes: Iterable[Span]) -> list[Span]:
    """The parts of `spans` that no span of `holes` (of the same counter and period) covers."""
    cut = sorted(holes)
    parts: list[Span] = []
    for span in spans:
        first = span.first
        for hole in cut:
            if hole[:2] != span[:2] or hole.last < first or hole.first > span.last:
                continue
            if hole.first > first:
                parts.append(span._replace(first=first, last=hole.first - 1))
            first = hole.last + 1
        if first <= span.last:
            parts.append(span._replace(first=first))
    return parts


class Run(NamedTuple):
    """`size` values in a row taken by `who` (`key:ID`, or the client's address when no key
    is needed) through `edge` (its reply-key prefix), with the Idempotency-Key when the request
    had one. Rows written before edges (or keys) were recorded hold two or three fields."""

    size: int
    who: str
    key: str | None = None
    edge: str | None = None

    @classmethod
    def of(cls, item: list[Any]) -> Run:
        """A run as an audit row's detail holds it."""
        return cls(*item)


def plain(value: object) -> list[Any]:
    """orjson's `default` for these shapes (it writes no tuple subclass itself): as the JSON
    array the audit rows have always held."""
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
