"""What `audit verify` holds to the chain among the tables the batchers read for an answer (issue
51), pure: `idempotency_keys`, which answers a retry, and `counters`, whose `start` and period
rules (reset, time zone) decide the values a frame hands out. infra/trail.py checks the rest.

A key's values are those its chained audit row gave it: a frame's row lists, per counter and
period, who took its values run by run in the order its range was split, a keyed record a run
of its own with its Idempotency-Key (`detail.r`, infra/spans.py `Run`). A counter's first value
in a period is `start` (or the one after what retention pruned), and every range a row holds is
of the period its reset and time zone put the row's commit time in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from infra.counters import Reset, zone
from infra.errors import InvalidCounter
from infra.ledger import NOT_DELIVERED
from infra.trail import Breach, Row, Snapshot

SKEW = timedelta(minutes=5)
"""How far a frame's own clock (which picks its period and day) may be from the commit time
Postgres writes: a day or period is held to the commit time's, give or take this."""


@dataclass(frozen=True, slots=True)
class Rules:
    """A counter's row as verify reads it: (name, start, reset, timezone)."""

    name: str
    start: int
    reset: Reset
    timezone: str

    @classmethod
    def of(cls, found: Sequence[Any]) -> Rules:
        name, start, reset, timezone = found
        return cls(name, int(start), Reset(reset), timezone)

    def refused(self) -> str | None:
        """Why its time zone is none (an edit that no create would take), or None."""
        try:
            zone(self.timezone)
        except InvalidCounter:
            return f"says time zone {self.timezone!r}, which is none"
        return None

    def periods(self, at: datetime) -> set[str]:
        """The periods a frame committed at `at` may have taken values of (SKEW either side)."""
        return {
            self.reset.period((at + shift).astimezone(zone(self.timezone)).date())
            for shift in (-SKEW, timedelta(0), SKEW)
        }

    def days(self, at: datetime) -> set[date]:
        return {
            (at + s).astimezone(zone(self.timezone)).date() for s in (-SKEW, timedelta(0), SKEW)
        }


@dataclass(frozen=True, slots=True)
class Keyed:
    """Values a keyed record took, as its audit row split them."""

    row: Row
    period: str
    first: int
    last: int


def keyed(rows: Sequence[Row], runs: Mapping[int, list[list[Any]]]) -> dict[tuple[str, str], Keyed]:
    """Each (counter, Idempotency-Key)'s newest run in the chains: `runs` is each row's
    `detail.r` (rows without a keyed counter left out)."""
    out: dict[tuple[str, str], Keyed] = {}
    for row in rows:
        groups = {(g[0], g[1]): g[2] for g in runs.get(row.id) or ()}
        for name, period, first, _ in row.ranges:
            for start, size, key in _split(first, groups.get((name, period)) or ()):
                if key is not None:
                    out[(name, key)] = Keyed(row, period, start, start + size - 1)
    return out


def _split(first: int, runs: Sequence[Sequence[Any]]) -> Iterator[tuple[int, int, str | None]]:
    cursor = first
    for run in runs:
        yield cursor, int(run[0]), run[2] if len(run) > 2 else None
        cursor += int(run[0])


def idempotency_keys(
    rows: Sequence[Row],
    runs: Mapping[int, list[list[Any]]],
    table: Sequence[tuple[Any, ...]],
    counters: Mapping[str, Rules],
    pruned: Mapping[tuple[str, str], int],
) -> list[Breach]:
    """The live `idempotency_keys` rows, as (counter, key, count, first, last, day), against the
    runs the chains hold: a retry is answered from this table, so a key repointed at other
    values would hand a retry values another request received."""
    found = keyed(rows, runs)
    lost = [(v[:4], r.id) for r in rows for v in r.voids if v[4] in NOT_DELIVERED]
    out: list[Breach] = []
    for counter, key, count, first, last, day in table:
        named, took = f"{counter}/{key}", found.get((counter, key))
        if took is None:
            if last > max((u for (c, _), u in pruned.items() if c == counter), default=0):
                out.append(Breach("idempotency_keys", named, "no audit row holds this key"))
            continue
        why = _key(took, int(count), int(first), int(last), day, counters.get(counter))
        void = next(
            (
                row
                for (c, p, a, b), row in lost
                if c == counter and p == took.period and a <= took.last and b >= took.first
            ),
            None,
        )
        if why is None and void is not None:
            why = f"its values are void, abandoned, in audit row {void}: the key was freed then"
        if why is not None:
            out.append(Breach("idempotency_keys", named, why))
    return out


def _key(
    took: Keyed, count: int, first: int, last: int, day: date, rules: Rules | None
) -> str | None:
    size = took.last - took.first + 1
    if (first, last, count) != (took.first, took.last, size):
        return (
            f"says values {first}-{last} (count {count}); audit row {took.row.id} gave this key "
            f"{took.first}-{took.last}: a retry would receive values it was never given"
        )
    if rules is not None and rules.refused() is None and day not in rules.days(took.row.at):
        return (
            f"says day {day.isoformat()}; audit row {took.row.id} gave its values at "
            f"{took.row.at.isoformat()} ({rules.timezone}): a retry would render another number"
        )
    return None


def counters(
    rows: Sequence[Row], table: Mapping[str, Rules], pruned: Mapping[tuple[str, str], int]
) -> list[Breach]:
    """Each counter's `start`, `reset` and `timezone` against the ranges the chains hold: the
    lowest value kept of a period is `start` (or the one after what retention pruned), and
    each range is of the period its row's commit time falls in."""
    lowest: dict[tuple[str, str], tuple[int, Row]] = {}
    out: list[Breach] = []
    told: set[str] = set()
    for each in table.values():
        wrong = each.refused()
        if wrong is not None:
            told.add(each.name)
            out.append(Breach("counters", each.name, wrong))
    for row in rows:
        for name, period, first, _ in row.ranges:
            rules = table.get(name)
            if rules is None:
                continue
            if (name, period) not in lowest or first < lowest[(name, period)][0]:
                lowest[(name, period)] = (first, row)
            why = None if name in told else _period(rules, period, row)
            if why is not None:
                told.add(name)
                out.append(Breach("counters", name, why))
    for (name, period), (first, row) in sorted(lowest.items()):
        rules, upto = table[name], pruned.get((name, period))
        held = rules.start if upto is None else upto + 1
        if first != held and name not in told:
            told.add(name)
            gone = "" if upto is None else f" (retention pruned up to {upto})"
            why = (
                f"says start {rules.start}; audit row {row.id} handed out {first} first in "
                f"period {period!r}{gone}"
            )
            out.append(Breach("counters", name, why))
    return out


def checked(seen: Snapshot) -> list[Breach]:
    """Every check of this module over one snapshot of the trail."""
    rules = {r.name: r for r in map(Rules.of, seen.counters)}
    pruned = {(c, p): int(u) for c, p, u in seen.pruned}
    return [
        *idempotency_keys(seen.rows, seen.runs, seen.keys, rules, pruned),
        *counters(seen.rows, rules, pruned),
    ]


def _period(rules: Rules, period: str, row: Row) -> str | None:
    refused = rules.reset.refuses(period)
    if refused is not None:
        return (
            f"says it resets {rules.reset.value}, but audit row {row.id} handed out values of "
            f"period {period!r}: {refused}"
        )
    if period not in rules.periods(row.at):
        return (
            f"says it resets {rules.reset.value} in {rules.timezone}, but audit row {row.id}, "
            f"committed at {row.at.isoformat()}, handed out values of period {period!r}"
        )
    return None
