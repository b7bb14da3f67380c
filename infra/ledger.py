"""The ledger, read: a period's completeness report and its export, from the audit trail. No I/O.

Every value of a period from `start` to the last handed out is accounted for by exactly one
audit row's range (issued), and may also be void (with a reason). A value in no range is a gap:
explained when retention pruned the rows that held it (`pruned`), unexplained otherwise. The
report also checks that the ranges rise with the order they were committed in.

A value's reply may not have reached its client when the edge that asked for it died (it never
said it stopped) before it answered: the report lists the runs issued to such an edge after it
last said all its requests were answered as `unsure`, with the requests that took them. Every
other issued value that is not void was delivered, as far as numerator can know (a client that
hangs up as its answer is written cannot be told apart from one that read it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import pairwise
from typing import Any

from infra.counters import Counter
from infra.lookalikes import skeleton
from infra.spans import Run


class VoidReason(StrEnum):
    """The reasons numerator gives its own voids; a user's void names its own, in free text
    that may not read as one of these (`reserved`)."""

    ABANDONED = "abandoned"
    """No client received the values: their edge gave up after the record was applied."""
    NOT_CONFIRMED = "not-confirmed"
    """Values of a counter that takes confirmations, not confirmed within CONFIRM_TTL_S."""


NOT_DELIVERED = frozenset({VoidReason.ABANDONED})
"""Void reasons that say no client received the values."""


RESERVED = frozenset(skeleton(reason) for reason in VoidReason)


def reserved(reason: str) -> bool:
    """Whether a user's reason reads as one of numerator's own (`Abandoned`, ` abandoned `,
    `ab\u200bandoned`, `\u0430bandoned` with a Cyrillic a, `not\u2011confirmed`): a report's
    reader could not tell them apart (infra/lookalikes.py)."""
    return skeleton(reason) in RESERVED


def reserved_pattern() -> str:
    """`reserved`'s plain spellings (case and white space aside) as an ECMA regular expression,
    for the OpenAPI schema; the service also refuses their look-alikes, which no pattern lists."""
    words = [
        "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in reason)
        for reason in sorted(VoidReason)
    ]
    return rf"^\s*(?:{'|'.join(words)})\s*$"


@dataclass(frozen=True, slots=True)
class Link:
    """One audit row: a frame's ranges and detail for one retention class, and its hashes."""

    id: int
    at: datetime
    chain: str | None
    ranges: list[list[Any]]
    detail: dict[str, list[list[Any]]] | None
    hash: str
    prev: str


SKEW_S = 0.05
"""How late an edge's settled moment may be written, for `EdgeEnd.holds`: the edge gives it as
an age, which Postgres turns into its own time when the statement runs (infra/adapters/postgres:
edge_seen), later than the edge measured it by the statement's trip."""


@dataclass(frozen=True, slots=True)
class EdgeEnd:
    """An edge that died: when it was last seen, and when its requests were last all settled
    (every request it began before then was answered or cancelled)."""

    seen_at: datetime
    settled_at: datetime

    def holds(self, at: datetime) -> bool:
        """Whether a value issued at `at` may still have been on its way to a client of the
        edge when it died: a value issued before the edge's last settled moment was answered."""
        return at >= self.settled_at - timedelta(seconds=SKEW_S)


@dataclass(frozen=True, slots=True)
class VoidRow:
    counter: str
    period: str
    first: int
    last: int
    reason: str
    who: str
    at: datetime
    link: Link | None = None
    """The audit row that holds the void."""

    def to_json(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "last": self.last,
            "reason": self.reason,
            "who": self.who,
            "at": self.at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class Taken:
    """Values taken together: by one record, or by records in a row from one requester."""

    first: int
    last: int
    who: str | None
    idempotency_key: str | None
    link: Link
    edge: str | None = None


def taken(link: Link, counter: str, period: str) -> Iterator[Taken]:
    """Who took the values of `counter` in `period` that `link` holds, run by run: the row's
    range for them split in the order the detail lists the runs."""
    groups = {(g[0], g[1]): g[2] for g in (link.detail or {}).get("r", [])}
    for name, kind, first, last in link.ranges:
        if name != counter or kind != period:
            continue
        runs = groups.get((name, kind))
        if not runs:  # a row from before the ledger: the range alone
            yield Taken(first, last, None, None, link)
            continue
        cursor = first
        for run in map(Run.of, runs):
            yield Taken(cursor, cursor + run.size - 1, run.who, run.key, link, run.edge)
            cursor += run.size


def voids(links: Sequence[Link], counter: str, period: str) -> list[VoidRow]:
    """The voids of `counter` in `period`, as the audit rows hold them (`detail.v`), in value
    order: the report reads them from the chains, which `audit verify` checks the `voids`
    table against."""
    out = [
        VoidRow(name, kind, first, last, reason, who, link.at, link)
        for link in links
        for name, kind, first, last, reason, who in (link.detail or {}).get("v") or ()
        if name == counter and kind == period
    ]
    return sorted(out, key=lambda v: v.first)


def confirmed(links: Sequence[Link], counter: str, period: str) -> list[tuple[int, int]]:
    """The spans of `counter` in `period` confirmed, as the audit rows hold them (`detail.c`)."""
    return [
        (first, last)
        for link in links
        for name, kind, first, last, _ in (link.detail or {}).get("c") or ()
        if name == counter and kind == period
    ]


def edges(links: Sequence[Link], counter: str, period: str) -> set[str]:
    """The edges that asked for values of `counter` in `period`."""
    return {t.edge for link in links for t in taken(link, counter, period) if t.edge}


def unsure(
    links: Sequence[Link],
    counter: str,
    period: str,
    dead: Mapping[str, EdgeEnd],
    voids: Sequence[VoidRow],
) -> list[tuple[Taken, list[tuple[int, int]]]]:
    """The runs whose values may not have reached their clients (their edge died while it might
    still have been answering them), with those of their values that are not void."""
    if not dead:
        return []
    void = [(v.first, v.last) for v in voids]
    out = []
    for link in links:
        for one in taken(link, counter, period):
            end = dead.get(one.edge or "")
            if end is not None and end.holds(link.at):
                left = subtract([(one.first, one.last)], void)
                if left:
                    out.append((one, left))
    return out


def ranges(links: Sequence[Link], counter: str, period: str) -> list[tuple[int, int, int]]:
    """(first, last, row id) of every range of `counter` in `period`, in commit order."""
    return [
        (first, last, link.id)
        for link in links
        for name, kind, first, last in link.ranges
        if name == counter and kind == period
    ]


def gaps(
    covered: Sequence[tuple[int, int, int]], low: int, high: int
) -> tuple[list[list[int]], list[list[int]]]:
    """The spans of [low, high] no range covers, and the spans two ranges both cover."""
    holes: list[list[int]] = []
    twice: list[list[int]] = []
    cursor = low
    for first, last, _ in sorted(covered):
        if first > cursor:
            holes.append([cursor, min(first - 1, high)])
        elif first < cursor:
            twice.append([first, min(last, cursor - 1)])
        cursor = max(cursor, last + 1)
    if cursor <= high:
        holes.append([cursor, high])
    return [h for h in holes if h[0] <= h[1] and h[0] <= high], twice


def subtract(
    spans: Sequence[tuple[int, int]], taken: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The values of `spans` that no span of `taken` holds, as spans, in order."""
    out: list[tuple[int, int]] = []
    cuts = sorted(taken)
    for first, last in sorted(spans):
        cursor = first
        for a, b in cuts:
            if b < cursor or a > last:
                continue
            if a > cursor:
                out.append((cursor, a - 1))
            cursor = max(cursor, b + 1)
        if cursor <= last:
            out.append((cursor, last))
    return out


def report(
    counter: Counter,
    period: str,
    allocated: int,
    links: Sequence[Link],
    voids: Sequence[VoidRow],
    pruned_upto: int | None,
    confirmed: Sequence[tuple[int, int]] | None = None,
    dead: Mapping[str, EdgeEnd] | None = None,
) -> dict[str, Any]:
    """The completeness report of one counter's period; `confirmed`, the spans confirmed, for
    a counter that takes confirmations; `dead`, the edges among its requesters that died."""
    start = counter.start
    last = start + allocated - 1
    covered = ranges(links, counter.name, period)
    holes, twice = gaps(covered, start, last)
    pruned, holes = _pruned(holes, start, pruned_upto)
    falls, beyond = _out_of_order(covered, last)
    by_reason: dict[str, int] = {}
    for void in voids:
        by_reason[void.reason] = by_reason.get(void.reason, 0) + void.last - void.first + 1
    not_delivered = sum(n for reason, n in by_reason.items() if reason in NOT_DELIVERED)
    doubt = unsure(links, counter.name, period, dead or {}, voids)
    unsure_count = sum(b - a + 1 for _, spans in doubt for a, b in spans)
    # delivery is unknown for those values even when a user voided them after
    lost = [v for v in voids if v.reason in NOT_DELIVERED]
    unknown = unsure(links, counter.name, period, dead or {}, lost) if dead else []
    return {
        "counter": counter.name,
        "period": period,
        "start": start,
        "first": start if allocated else None,
        "last": last if allocated else None,
        "issued": allocated,
        "delivered": allocated - not_delivered - sum(b - a + 1 for _, x in unknown for a, b in x),
        "voided": dict(sorted(by_reason.items())),
        "voids": [void.to_json() for void in voids],
        "unsure": unsure_count,
        "unsure_runs": _unsure_runs(doubt, dead or {}),
        "trail": {
            "rows": len({row for _, _, row in covered}),
            "pruned": pruned,
            "retention_days": counter.retention_days,
        },
        **_confirmation(start, last, allocated, voids, confirmed),
        "unexplained_gaps": sum(b - a + 1 for a, b in holes),
        "gaps": holes,
        "issued_twice": twice,
        "rising": not falls,
        "falls": falls[:10],
        "past_last": beyond[:10],
        "breaches": breaches(holes, twice, falls, beyond, last),
    }


def _out_of_order(
    covered: Sequence[tuple[int, int, int]], last: int
) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    """The trail's ranges that fall back below the one before them, and those past `last`."""
    falls = [
        {"row": row, "first": first, "after": before}
        for (_, before, _), (first, _, row) in pairwise(covered)
        if first <= before
    ]
    beyond = [
        {"row": row, "first": max(first, last + 1), "last": end}
        for first, end, row in covered
        if end > last
    ]
    return falls, beyond


def breaches(
    holes: Sequence[Sequence[int]],
    twice: Sequence[Sequence[int]],
    falls: Sequence[Mapping[str, int]],
    beyond: Sequence[Mapping[str, int]],
    last: int,
) -> list[str]:
    """What the report found wrong, one sentence each: an empty list is the all-clear."""
    out = [f"values {a} to {b}: no audit row holds them" for a, b in holes]
    out += [f"values {a} to {b} are held by two audit rows: handed out twice" for a, b in twice]
    out += [
        f"audit row {f['row']} holds {f['first']}, not above {f['after']} before it"
        for f in falls[:10]
    ]
    out += [
        f"audit row {b['row']} holds values {b['first']} to {b['last']}, past the last value "
        f"handed out ({last}): the counter was moved back, or the row was forged"
        for b in beyond[:10]
    ]
    return out


def _pruned(
    holes: list[list[int]], start: int, pruned_upto: int | None
) -> tuple[list[int] | None, list[list[int]]]:
    """The span at the start of the period whose trail retention pruned, and the holes left
    once it is set apart from them."""
    if not holes or pruned_upto is None or holes[0][0] != start or pruned_upto < start:
        return None, holes
    pruned = [start, min(holes[0][1], pruned_upto)]
    rest = [pruned[1] + 1, holes[0][1]]
    return pruned, ([rest] if rest[0] <= rest[1] else []) + holes[1:]


def _unsure_runs(
    doubt: Sequence[tuple[Taken, list[tuple[int, int]]]], dead: Mapping[str, EdgeEnd]
) -> list[dict[str, Any]]:
    """Each run of values whose delivery is unknown, with who asked and the edge that died."""
    return [
        {
            "first": a,
            "last": b,
            "at": one.link.at.isoformat(),
            "who": one.who or "",
            "idempotency_key": one.idempotency_key or "",
            "edge": one.edge,
            "edge_last_seen": dead[one.edge or ""].seen_at.isoformat(),
        }
        for one, spans in doubt
        for a, b in spans
    ]


def _confirmation(
    start: int,
    last: int,
    allocated: int,
    voids: Sequence[VoidRow],
    confirmed: Sequence[tuple[int, int]] | None,
) -> dict[str, Any]:
    """How many values are confirmed, and how many await confirmation (neither confirmed nor
    void): for a counter that takes confirmations."""
    if confirmed is None:
        return {}
    issued = [(start, last)] if allocated else []
    done = subtract(issued, [(v.first, v.last) for v in voids])
    waiting = subtract(done, confirmed)
    count = sum(b - a + 1 for a, b in subtract(issued, subtract(issued, confirmed)))
    return {"confirmed": count, "awaiting_confirmation": sum(b - a + 1 for a, b in waiting)}


EXPORT_COLUMNS = (
    "first",
    "last",
    "status",
    "reason",
    "at",
    "who",
    "idempotency_key",
    "edge",
    "delivery",
    "row",
    "row_hash",
)


def export(
    counter: str,
    period: str,
    links: Sequence[Link],
    voids: Sequence[VoidRow],
    dead: Mapping[str, EdgeEnd] | None = None,
) -> list[dict[str, Any]]:
    """What an auditor keeps of a period: every issued range with who took it, through which
    edge, whether its delivery is unsure (its edge died), and the audit row (and its hash) that
    says so; and every void with its reason, in value order."""
    out: list[dict[str, Any]] = []
    for one in (t for link in links for t in taken(link, counter, period)):
        end = (dead or {}).get(one.edge or "")
        out.append(
            {
                "first": one.first,
                "last": one.last,
                "status": "issued",
                "reason": "",
                "at": one.link.at.isoformat(),
                "who": one.who or "",
                "idempotency_key": one.idempotency_key or "",
                "edge": one.edge or "",
                "delivery": "unsure" if end is not None and end.holds(one.link.at) else "",
                "row": one.link.id,
                "row_hash": one.link.hash,
            }
        )
    for void in voids:
        out.append(
            {
                "first": void.first,
                "last": void.last,
                "status": "void",
                "reason": void.reason,
                "at": void.at.isoformat(),
                "who": void.who,
                "idempotency_key": "",
                "edge": "",
                "delivery": "",
                "row": void.link.id if void.link else "",
                "row_hash": void.link.hash if void.link else "",
            }
        )
    out.sort(key=lambda row: (row["first"], row["status"] != "issued"))
    return out
