"""Allocation without Postgres: splitting one period's delta among the records of a frame, and
the pure steps around apply's one transaction."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from batcher.allocation import Live, assign, classify, demand, share, split
from infra.counters import Counter, Reset
from infra.ports import Claim, Entry, Lease
from infra.wire import Record, Reply, ReplyError

counts = st.lists(st.integers(min_value=1, max_value=1000), min_size=1, max_size=200)


@given(st.integers(min_value=0, max_value=2**40), st.integers(min_value=0, max_value=10**6), counts)
def test_split_covers_the_new_values_exactly_once_in_order(
    start: int, earlier: int, wanted: list[int]
) -> None:
    total = earlier + sum(wanted)  # what Postgres returns after adding this frame's delta
    ranges = split(start, total, wanted)
    assert [last - first + 1 for first, last in ranges] == wanted
    assert ranges[0][0] == start + earlier  # right after what earlier frames handed out
    assert ranges[-1][1] == start + total - 1
    for (_, last), (first, _) in pairwise(ranges):
        assert first == last + 1  # contiguous, no overlap, increasing


@given(st.integers(min_value=0, max_value=1000), st.lists(counts, min_size=1, max_size=20))
def test_successive_frames_never_overlap(start: int, frames: list[list[int]]) -> None:
    total = 0
    handed: list[int] = []
    for wanted in frames:
        total += sum(wanted)
        for first, last in split(start, total, wanted):
            handed.extend(range(first, last + 1))
    assert handed == list(range(start, start + total))


# The pure steps around apply's one transaction: classify, assign, demand, share.

NOW = datetime(2026, 12, 31, 23, 30, tzinfo=UTC)
LEASE = Lease("s", "0", "me", 1, None, applied=10)
COUNTERS = {
    "inv": Counter(name="inv", start=1, template="I{value}", reset=Reset.YEARLY, timezone="UTC"),
    # An hour ahead of UTC: already the next year there.
    "ber": Counter(
        name="ber", start=1, template="{value}", reset=Reset.YEARLY, timezone="Europe/Berlin"
    ),
}


def entry(sequence: int, record: Record | None, problem: str = "", key: str | None = None) -> Entry:
    return Entry(
        "0", str(sequence), record, b"raw", problem, key or (record.key if record else None)
    )


def test_classify_sorts_every_entry_by_what_becomes_of_it() -> None:
    kept = Reply("r10", "inv", 5, 5, "I{value}", NOW.date())
    entries = [
        entry(10, Record("r10", "inv")),  # at or below applied: a replay, answered as before
        entry(11, None, "not JSON", key="r11"),  # poison: dead letter, answered bad-record
        entry(12, Record("r12", "inv", deadline=99.0)),  # its client gave up before the frame
        entry(13, Record("r13", "nope")),  # no such counter: dead letter, answered
        entry(14, Record("r14", "inv", 2)),
        entry(15, Record("r15", "ber")),
    ]
    sorted_ = classify(entries, COUNTERS, LEASE, NOW, wall=100.0, earlier={"r10": kept})
    assert [r.key for r in sorted_.replies] == ["r10", "r11", "r12", "r13"]
    assert sorted_.replies[0] == kept
    assert [r.error for r in sorted_.replies[1:]] == [
        ReplyError.BAD_RECORD,
        ReplyError.EXPIRED,
        ReplyError.COUNTER_NOT_FOUND,
    ]
    assert [letter.sequence for letter in sorted_.letters] == ["11", "13"]
    assert (sorted_.replays, sorted_.expired) == (1, 1)
    assert [(x.record.key, x.period) for x in sorted_.live] == [("r14", "2026"), ("r15", "2027")]


def test_a_replay_whose_reply_is_gone_allocates_nothing() -> None:
    sorted_ = classify([entry(3, Record("r3", "inv"))], COUNTERS, LEASE, NOW, 0.0, {})
    assert sorted_.live == [] and sorted_.replies[0].error is ReplyError.EXPIRED


def live(key: str, count: int = 1, idempotency: str | None = None) -> Live:
    return Live(Record(key, "inv", count, idempotency), COUNTERS["inv"], "2026", NOW.date())


def test_assign_lets_one_record_per_idempotency_key_take_values() -> None:
    found = {("inv", "old"): Claim("inv", "old", 1, 7, 7, NOW.date())}
    records = [live("a"), live("b", 2, "new"), live("c", 2, "new"), live("d", 1, "old"), live("e")]
    takers, sharers = assign(records, found)
    assert [x.record.key for x in takers] == ["a", "b", "e"]
    assert [x.record.key for x in sharers] == ["c", "d"]
    assert demand(takers) == {("inv", "2026"): [1, 2, 1]}


def test_share_answers_a_repeated_key_with_its_claim_or_refuses_another_count() -> None:
    claims = {("inv", "k"): Claim("inv", "k", 2, 3, 4, NOW.date())}
    same, other = share([live("x", 2, "k"), live("y", 3, "k")], claims)
    assert (same.first, same.last, same.error) == (3, 4, None)
    assert other.error is ReplyError.IDEMPOTENCY_KEY_REUSED and other.first == 0
