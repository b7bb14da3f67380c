"""The pure parts of the audit trail's checks (infra/trail.py), a period's form per reset, and the
heads file `audit verify --heads` reads (issue 29)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from infra import trail
from infra.adapters.anchors import FileAnchors
from infra.counters import Reset
from numerator.ledger import anchors, parts, prunes

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


def held(rows: list[trail.Row]) -> dict[int, trail.Held]:
    return {r.id: trail.Held(r.chain, r.hash, r.sound) for r in rows}


def test_an_anchor_holds_is_pruned_or_is_a_breach() -> None:
    rows = held([row(5, bytes([4])), row(6, bytes([5]))])
    at = trail.anchors_of
    assert trail.anchored(at({"s/0/c": {"row": 5, "hash": "05"}}), rows, {}) == (
        [],
        ["s/0/c"],
        [],
    )
    gone = at({"s/0/c": {"row": 7, "hash": "00"}})
    assert "truncated" in trail.anchored(gone, rows, {})[0][0].why
    older = at({"s/0/c": {"row": 2, "hash": "00"}})
    assert trail.anchored(older, rows, {"s/0/c": trail.Start(4, bytes([4]))})[2] == ["s/0/c"]
    other = at({"s/0/c": {"row": 6, "hash": "ff"}})
    assert "rewritten" in trail.anchored(other, rows, {})[0][0].why
    unsound = {5: trail.Held("s/0/c", bytes([5]), sound=False)}
    assert (
        "content" in trail.anchored(at({"s/0/c": {"row": 5, "hash": "05"}}), unsound, {})[0][0].why
    )


def test_every_anchored_head_is_checked_not_only_the_newest() -> None:
    """The issue's rewrite: row 5 edited and rows 5-6 rehashed, then a batcher anchored the
    forged head 6; the head anchored before (row 5, its true hash) names the rewrite."""
    forged = {5: trail.Held("s/0/c", b"\xf5"), 6: trail.Held("s/0/c", b"\xf6")}
    true_then_forged = [
        trail.Anchor("s/0/c", 5, "05", "t1 by b1"),
        trail.Anchor("s/0/c", 6, "f6", "t2 by b2"),
    ]
    breaches, ok, _ = trail.anchored(true_then_forged, forged, {})
    (hit,) = breaches
    assert (hit.row, hit.chain, ok) == (5, "s/0/c", [])
    assert "rewritten" in hit.why and "t1 by b1" in hit.why
    assert trail.anchored(true_then_forged[1:], forged, {})[0] == [], "the newest alone holds"


def test_two_anchors_that_disagree_on_a_row_are_named_both() -> None:
    rows = held([row(5, bytes([4]))])
    given = [trail.Anchor("s/0/c", 5, "05", "t1 by b1"), trail.Anchor("s/0/c", 5, "aa", "t2 by b2")]
    found = trail.anchored(given, rows, {})[0]
    (both,) = [b for b in found if b.table == "anchors"]
    assert "t1 by b1" in both.why and "t2 by b2" in both.why and both.row == 5
    assert trail.anchored(given[:1] * 3, rows, {})[0] == [], "the same head many times: one"


def test_each_chains_newest_anchored_heads() -> None:
    given = [
        trail.Anchor("a", 3, "aa"),
        trail.Anchor("a", 9, "cc"),
        trail.Anchor("a", 9, "dd"),
        trail.Anchor("b", 1, "bb"),
        trail.Anchor("a", 9, "cc", "again"),
    ]
    assert [(a.chain, a.row, a.hash) for a in trail.newest(given)] == [
        ("a", 9, "cc"),
        ("a", 9, "dd"),
        ("b", 1, "bb"),
    ]
    record = {"at": "t", "by": "b", "heads": {"a": {"row": 2, "hash": "AB", "at": "x"}}}
    assert trail.anchored_in(record) == [trail.Anchor("a", 2, "ab", "t by b")]


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


def test_a_heads_file_gives_every_head_once() -> None:
    older = {
        "at": "1",
        "by": "b1",
        "heads": {"a/0/c": {"row": 3, "hash": "aa"}, "b/0/c": {"row": 1, "hash": "b"}},
    }
    newer = {"at": "2", "by": "b2", "heads": {"a/0/c": {"row": 9, "hash": "cc", "at": "x"}}}
    again = {"at": "3", "by": "b1", "heads": {"b/0/c": {"row": 1, "hash": "b"}}}
    lines = "\n".join(json.dumps(r) for r in (newer, older, again))
    assert anchors(lines) == [
        {"chain": "a/0/c", "row": 3, "hash": "aa", "at": "1", "by": "b1"},
        {"chain": "a/0/c", "row": 9, "hash": "cc", "at": "2", "by": "b2"},
        {"chain": "b/0/c", "row": 1, "hash": "b", "at": "1", "by": "b1"},
    ]
    assert [h["chain"] for h in anchors(json.dumps(older))] == ["a/0/c", "b/0/c"]
    with pytest.raises(SystemExit):
        anchors("{}")


async def test_a_file_sink_is_read_back_from_its_mark_on(tmp_path: Path) -> None:
    sink = FileAnchors(tmp_path / "heads.jsonl")
    assert await sink.since("") == ([], "")
    one, two = ({"at": str(i), "by": "b", "heads": {"c": {"row": i}}} for i in (1, 2))
    await sink.keep(one)
    found, mark = await sink.since("")
    assert found == [one]
    with sink.path.open("ab") as out:
        out.write(b'{"at": "3", "he')  # a record cut short as it is written: not read yet
    assert await sink.since(mark) == ([], mark)
    assert (await sink.since("0"))[0] == [one]
    sink.path.write_bytes(sink.path.read_bytes()[: int(mark)])
    await sink.keep(two)
    assert (await sink.since(mark))[0] == [two]


def test_chain_starts_against_the_anchored_prunes() -> None:
    start = trail.Start(4, bytes([4]))
    assert trail.starts_anchored({"s/0/c": start}, {"s/0/c": start}, ["s/0/c"]) == []
    assert trail.starts_anchored({}, {"s/0/c": start}, []) == [], "nothing anchored was cut"
    (hit,) = trail.starts_anchored({}, {"s/0/c": start}, ["s/0/c"])
    assert hit.table == "chain_starts" and "no anchored prune" in hit.why
    older = trail.Start(2, bytes([2]))
    (hit,) = trail.starts_anchored({"s/0/c": older}, {"s/0/c": start}, [])
    assert "says up to row 2" in hit.why


def test_the_heads_go_in_parts_that_fit_a_request_with_the_prunes() -> None:
    lines = [
        {"at": f"{i}", "by": "b", "heads": {"s/0/c": {"row": i, "hash": f"{i:064x}"}}}
        for i in range(1, 301)
    ]
    lines.append(
        {
            "at": "x",
            "by": "b",
            "heads": {},
            "starts": {"s/0/c": {"after_id": 3, "after_hash": "03"}},
        }
    )
    lines.append(
        {
            "at": "y",
            "by": "b",
            "heads": {},
            "starts": {"s/0/c": {"after_id": 9, "after_hash": "09"}},
        }
    )
    text = "\n".join(json.dumps(r) for r in lines)
    starts = prunes(text)
    assert starts == {"s/0/c": {"after_id": 9, "after_hash": "09"}}
    sent = parts(anchors(text), starts)
    assert len(sent) > 1 and all(len(json.dumps(p)) <= 16_384 for p in sent)
    assert [h["row"] for p in sent for h in p["heads"]] == list(range(1, 301))
    assert all(p["starts"] == starts for p in sent)
    assert prunes(json.dumps({"heads": {"s/0/c": {"row": 1, "hash": "01"}}})) is None


def test_a_buckets_objects_put_together_by_cat_are_read() -> None:
    """docs/invoices.md's procedure: `cat heads/*.json > heads.jsonl`, objects that (before
    issue 51) ended without a newline, so that cat put them on one line."""
    one = {"at": "1", "by": "b", "heads": {"a": {"row": 1, "hash": "01"}}}
    two = {"at": "2", "by": "b", "heads": {"a": {"row": 2, "hash": "02"}}}
    assert [h["row"] for h in anchors(json.dumps(one) + json.dumps(two))] == [1, 2]
    assert [h["row"] for h in anchors(json.dumps([one, two]))] == [1, 2]
    with pytest.raises(SystemExit, match="not JSON at line 2"):
        anchors(json.dumps(one) + "\n{oops")
