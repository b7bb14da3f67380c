"""infra/answers.py without Postgres: idempotency keys and counters' rules held to the runs and
ranges the audit rows hold (issue 51)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from infra import answers, trail
from infra.counters import Reset

AT = datetime(2026, 12, 2, 12, tzinfo=UTC)
RULES = {"inv": answers.Rules("inv", 1, Reset.NEVER, "UTC")}


def row(id: int, ranges: list[list[object]], **rest: object) -> trail.Row:
    return trail.Row(
        id,
        "s/0/c",
        bytes([id]),
        b"",
        True,
        True,
        True,
        AT,
        AT + timedelta(days=1),
        ranges,
        **rest,  # type: ignore[arg-type]
    )


# Row 1 split 1-5: 2 values to a, 3 to b with key k1; row 2 took 6-6 for key k1 again (a key
# taken anew after it expired: the newest run is the key's).
ROWS = [row(1, [["inv", "", 1, 5]]), row(2, [["inv", "", 6, 6]])]
RUNS = {
    1: [["inv", "", [[2, "a", None, "e"], [3, "b", "k1", "e"]]]],
    2: [["inv", "", [[1, "c", "k1", "e"]]]],
}


def span(took: answers.Keyed) -> tuple[int, int]:
    return took.first, took.last


def test_a_keys_values_are_its_newest_run() -> None:
    assert span(answers.keyed(ROWS[:1], RUNS)[("inv", "k1")]) == (3, 5)
    assert span(answers.keyed(ROWS, RUNS)[("inv", "k1")]) == (6, 6)
    good = [("inv", "k1", 1, 6, 6, AT.date())]
    assert answers.idempotency_keys(ROWS, RUNS, good, RULES, {}) == []
    moved = [("inv", "k1", 3, 3, 5, AT.date())]
    (hit,) = answers.idempotency_keys(ROWS, RUNS, moved, RULES, {})
    assert hit.row == "inv/k1" and "gave this key 6-6" in hit.why
    day = [("inv", "k1", 1, 6, 6, date(2020, 1, 1))]
    assert "says day" in answers.idempotency_keys(ROWS, RUNS, day, RULES, {})[0].why
    forged = [("inv", "k9", 1, 4, 4, AT.date())]
    assert "no audit row" in answers.idempotency_keys(ROWS, RUNS, forged, RULES, {})[0].why
    assert answers.idempotency_keys(ROWS, RUNS, forged, RULES, {("inv", ""): 9}) == [], "pruned"


def test_a_key_over_abandoned_values() -> None:
    void = row(3, [], voids=[["inv", "", 6, 6, "abandoned", ""]])
    good = [("inv", "k1", 1, 6, 6, AT.date())]
    (hit,) = answers.idempotency_keys([*ROWS, void], RUNS, good, RULES, {})
    assert "abandoned" in hit.why and "row 3" in hit.why


def test_a_counters_start_and_period_rules_against_its_ranges() -> None:
    assert answers.counters(ROWS, RULES, {}) == []
    moved = {"inv": answers.Rules("inv", 11, Reset.NEVER, "UTC")}
    assert "says start 11" in answers.counters(ROWS, moved, {})[0].why
    assert answers.counters(ROWS[1:], RULES, {("inv", ""): 5}) == [], "pruned up to 5"
    assert "pruned up to 4" in answers.counters(ROWS[1:], RULES, {("inv", ""): 4})[0].why
    yearly = {"inv": answers.Rules("inv", 1, Reset.YEARLY, "UTC")}
    assert "resets yearly" in answers.counters(ROWS, yearly, {})[0].why
    daily = [row(1, [["inv", "2026-12-02", 1, 5]])]
    rules = {"inv": answers.Rules("inv", 1, Reset.DAILY, "UTC")}
    assert answers.counters(daily, rules, {}) == []
    later = {"inv": answers.Rules("inv", 1, Reset.DAILY, "Etc/GMT-14")}  # 02:00 the next day
    assert "in Etc/GMT-14" in answers.counters(daily, later, {})[0].why
    none = {"inv": answers.Rules("inv", 1, Reset.DAILY, "Nowhere/None")}
    assert "which is none" in answers.counters(daily, none, {})[0].why
