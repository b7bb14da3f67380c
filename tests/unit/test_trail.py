"""The pure parts of the audit trail's checks (infra/trail.py), a period's form per reset, and the
heads file `audit verify --heads` reads (issue 29)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from infra import trail
from infra.counters import Reset
from numerator.ledger import anchors

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def row(id: int, prev: bytes, **rest: object) -> trail.Row:
    fields = {"sound": True, "member": True, "named": True, "chain": "s/0/c"}
    fields.update(rest)
    return trail.Row(
        id=id,
        hash=bytes([id]),
        prev=prev,
        at=NOW,
        keep_until=NOW + timedelta(days=1),
        **fields,  # type: ignore[arg-type]
    )


def test_a_whole_chain_is_sound_and_each_break_is_named() -> None:
    whole = [row(1, b""), row(2, bytes([1])), row(3, bytes([2]))]
    assert trail.chains(whole, {}) == []
    gap = [row(1, b""), row(3, bytes([2]))]
    assert [b.row for b in trail.chains(gap, {})] == [3]
    headless = [row(2, bytes([1])), row(3, bytes([2]))]
    assert [b.row for b in trail.chains(headless, {})] == [2], "first rows deleted"
    pruned = {"s/0/c": trail.Start(1, bytes([1]))}
    assert trail.chains(headless, pruned) == [], "retention pruned row 1"
    assert [b.row for b in trail.chains([row(3, bytes([2]))], pruned)] == [3]


def test_voids_are_compared_both_ways() -> None:
    chained = [row(1, b"", voids=[["inv", "", 4, 4, "spoiled", "me"]])]
    keep = NOW + timedelta(days=1)
    same = [("inv", "", 4, 4, "spoiled", "me", keep)]
    assert trail.voids(chained, same, NOW) == []
    edited = [("inv", "", 4, 4, "typo", "me", keep)]
    assert "'typo'" in trail.voids(chained, edited, NOW)[0].why
    assert "missing" in trail.voids(chained, [], NOW)[0].why
    forged = [("inv", "", 9, 9, "abandoned", "", keep)]
    assert {b.row for b in trail.voids([], forged, NOW)} == {"inv//9"}


def test_counter_values_against_the_highest_value_held() -> None:
    rows = [row(1, b"", ranges=[["inv", "", 1, 30]])]
    assert trail.counter_values(rows, [("inv", "", 30, 1)], {}) == []
    assert "moved back" in trail.counter_values(rows, [("inv", "", 20, 1)], {})[0].why
    assert "only up to 30" in trail.counter_values(rows, [("inv", "", 35, 1)], {})[0].why
    assert trail.counter_values([], [("inv", "", 30, 1)], {("inv", ""): 30}) == [], "pruned"


def test_an_anchor_holds_is_pruned_or_is_a_breach() -> None:
    rows = [row(5, bytes([4])), row(6, bytes([5]))]
    held = {"s/0/c": {"row": 5, "hash": bytes([5]).hex()}}
    assert trail.anchored(held, rows, {}) == ([], ["s/0/c"], [])
    gone = {"s/0/c": {"row": 7, "hash": "00"}}
    assert "truncated" in trail.anchored(gone, rows, {})[0][0].why
    older = {"s/0/c": {"row": 2, "hash": "00"}}
    assert trail.anchored(older, rows, {"s/0/c": trail.Start(4, bytes([4]))})[2] == ["s/0/c"]
    other = {"s/0/c": {"row": 6, "hash": "ff"}}
    assert "rewritten" in trail.anchored(other, rows, {})[0][0].why


@pytest.mark.parametrize(
    ("reset", "period", "refused"),
    [
        (Reset.YEARLY, "2026", False),
        (Reset.YEARLY, "2026-12", True),
        (Reset.MONTHLY, "2026", True),
        (Reset.MONTHLY, "2026-13", True),
        (Reset.MONTHLY, "2026-02", False),
        (Reset.DAILY, "2026-02-30", True),
        (Reset.DAILY, "2028-02-29", False),
        (Reset.NEVER, "", False),
        (Reset.NEVER, "2026", True),
    ],
)
def test_a_period_takes_its_resets_form(reset: Reset, period: str, refused: bool) -> None:
    assert (reset.refuses(period) is not None) is refused


def test_a_heads_file_gives_each_chains_newest_head() -> None:
    older = {
        "at": "1",
        "heads": {"a/0/c": {"row": 3, "hash": "aa"}, "b/0/c": {"row": 1, "hash": "b"}},
    }
    newer = {"at": "2", "heads": {"a/0/c": {"row": 9, "hash": "cc", "at": "x"}}}
    lines = "\n".join(json.dumps(r) for r in (newer, older))
    assert anchors(lines) == {"a/0/c": {"row": 9, "hash": "cc"}, "b/0/c": {"row": 1, "hash": "b"}}
    assert anchors(json.dumps(older)) == {k: v for k, v in older["heads"].items()}
    with pytest.raises(SystemExit):
        anchors("{}")


def test_one_counters_check_leaves_the_other_counters_of_its_rows_alone() -> None:
    """`audit verify inv` reads the tables for `inv` only, while its chains' rows hold other
    counters' voids, confirmations and ranges too: those are not 'missing' (the matrix's
    two-counter runs were all called unsound)."""
    both = [
        row(
            1,
            b"",
            ranges=[["inv", "", 1, 3], ["rcpt", "", 1, 5]],
            voids=[["rcpt", "", 2, 2, "spoiled", "me"]],
            confirms=[["rcpt", "", 1, 1, "me"]],
        )
    ]
    assert trail.voids(both, [], NOW, "inv") == []
    assert trail.confirmations(both, [], NOW, "inv") == []
    assert trail.counter_values(both, [("inv", "", 3, 1)], {}, "inv") == []
    assert trail.voids(both, [], NOW) != [], "all counters: rcpt's void is missing"
