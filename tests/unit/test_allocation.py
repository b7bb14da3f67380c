"""Allocation without Postgres: splitting one period's delta among the records of a frame, and
the pure steps around apply's one transaction."""

from __future__ import annotations

from datetime import UTC, date, datetime
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from batcher.classify import ConfirmAsked, Live, VoidAsked, classify
from batcher.handout import (
    abandon,
    assign,
    audits,
    confirmed,
    confirming,
    demand,
    hand_out,
    refuse,
    share,
    split,
    void_asks,
    voided,
)
from infra.counters import Counter, Reset
from infra.ports import Claim, Entry, Lease, NotMade
from infra.spans import Span
from infra.wire import Cancel, Confirm, Record, Reply, ReplyError, Void

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


def test_classify_sets_voids_confirms_and_cancels_apart_with_their_periods() -> None:
    entries = [
        entry(11, Record("r11", "inv")),
        entry(12, Cancel("r11", "inv")),  # its record is in this frame: it takes nothing
        entry(13, Cancel("r-old", "inv")),  # applied in an earlier frame: voided, abandoned
        entry(14, Void("v1", "inv", 3, 4, "typo")),  # no period named: the current one
        entry(15, Void("v2", "inv", 1, 1, "typo", period="2025")),
        entry(16, Confirm("c1", "ber", 1, 2, day=date(2027, 1, 1))),
        entry(17, Void("v3", "nope", 1, 1, "typo")),  # no such counter: a dead letter
    ]
    sorted_ = classify(entries, COUNTERS, LEASE, NOW, 0.0, {})
    assert sorted_.live == [] and sorted_.cancelled == 1
    assert [c.key for c in sorted_.cancels] == ["r-old"]
    assert [(v.key, period) for v, _, period in sorted_.voids] == [("v1", "2026"), ("v2", "2025")]
    assert [(c.key, period) for c, _, period in sorted_.confirms] == [("c1", "2027")]
    assert [r.error for r in sorted_.replies] == [ReplyError.COUNTER_NOT_FOUND]
    assert not sorted_.plain()  # a frame with voids is not one statement's work


def test_a_frame_of_takers_without_keys_is_plain() -> None:
    takers = classify(
        [entry(11, Record("a", "inv")), entry(12, Record("b", "ber"))],
        COUNTERS,
        LEASE,
        NOW,
        0.0,
        {},
    )
    assert takers.plain()
    keyed = classify([entry(11, Record("a", "inv", 1, "k"))], COUNTERS, LEASE, NOW, 0.0, {})
    assert not keyed.plain()
    poisoned = classify(
        [entry(11, Record("a", "inv")), entry(12, None, "bad")], COUNTERS, LEASE, NOW, 0.0, {}
    )
    assert not poisoned.plain()


def test_hand_out_splits_each_delta_in_arrival_order_and_claims_the_keyed() -> None:
    takers = [live("a", 2), live("b", 1, "k"), live("c", 3)]
    wanted = demand(takers)
    handed = hand_out(takers, wanted, {("inv", "2026"): 16}, COUNTERS)  # 10 before this frame
    assert [(r.key, r.first, r.last) for r in handed.replies] == [
        ("a", 11, 12),
        ("b", 13, 13),
        ("c", 14, 16),
    ]
    assert handed.ranges == [("inv", "2026", 11, 16)] and handed.allocated == 6
    assert handed.claims == [Claim("inv", "k", 1, 13, 13, NOW.date(), "b")]  # held by "b"
    assert dict(handed.taken)["c"] == ("inv", "2026", 14, 16)


def test_abandon_voids_what_a_late_cancel_names_and_nothing_else() -> None:
    recent = {"r1": ("inv", "2026", 5, 6)}
    asks = abandon([Cancel("r1", "inv"), Cancel("r2", "inv")], recent, COUNTERS, 60.0)
    assert [(a.counter, a.first, a.last, a.reason) for a in asks] == [("inv", 5, 6, "abandoned")]


def test_audits_merge_a_requesters_keyless_run_and_keep_keys_apart() -> None:
    records = [live("e1:a"), live("e1:b", 2), live("e1:c", 1, "k"), live("e2:d")]
    rows = audits(records, (), COUNTERS, 60.0)
    ((_, _, runs),) = next(iter(rows.values())).detail["r"]
    assert [run[0] for run in runs] == [3, 1, 1]  # a and b merge; the keyed one and e2 apart


def test_refuse_answers_the_takers_of_a_period_below_its_floor_and_keeps_the_rest() -> None:
    ber = Live(Record("b", "ber"), COUNTERS["ber"], "2027", NOW.date())
    takers = [live("a"), ber, live("c")]
    wanted = demand(takers)
    refusal = refuse(takers, wanted, {("ber", "2027"): 1}, {("inv", "2026"): 40})
    assert [x.record.key for x in refusal.takers] == ["b"]
    assert refusal.wanted == {("ber", "2027"): [1]}
    assert [r.key for r in refusal.replies] == ["a", "c"]
    assert {r.error for r in refusal.replies} == {ReplyError.REWOUND}
    assert refusal.rewound == {("inv", "2026"): 40}
    assert refuse(takers, wanted, {**dict.fromkeys(wanted, 1)}, {}).replies == []


def test_confirmations_of_a_counter_that_takes_none_are_refused_the_rest_answered() -> None:
    takes = Counter(name="ack", start=1, confirm=True)
    asked = [
        ConfirmAsked(Confirm("c1", "inv", 1, 2), COUNTERS["inv"], "2026"),
        ConfirmAsked(Confirm("c2", "ack", 1, 2), takes, ""),
        ConfirmAsked(Confirm("c3", "ack", 5, 5), takes, ""),
    ]
    asking = confirming(asked, 60.0)
    assert [a.first for a in asking.asks] == [1, 5]
    done = confirmed(asking, [True, NotMade(ReplyError.NOT_ISSUED, "no")], NOW)
    assert [a.first for a in done.made] == [1]
    assert [(r.key, r.error) for r in done.replies] == [
        ("c1", ReplyError.NOT_CONFIRMABLE),
        ("c2", None),
        ("c3", ReplyError.NOT_ISSUED),
    ]


def test_voided_lists_the_abandoned_voids_made_first_and_answers_only_who_asked() -> None:
    asked = [
        VoidAsked(Void("v1", "inv", 3, 4, "typo"), COUNTERS["inv"], "2026"),
        VoidAsked(Void("v2", "inv", 9, 9, "typo"), COUNTERS["inv"], "2026"),
    ]
    asks = void_asks(asked, 60.0)
    gone = abandon([Cancel("r1", "inv")], {"r1": Span("inv", "2026", 5, 7)}, COUNTERS, 60.0)
    results = [True, NotMade(ReplyError.ALREADY_VOID, "no"), True]
    out = voided(asked, asks, gone, results, NOW)
    assert [(a.first, a.reason) for a in out.made] == [(5, "abandoned"), (3, "typo")]
    assert out.abandoned == 3
    assert [(r.key, r.error) for r in out.replies] == [
        ("v1", None),
        ("v2", ReplyError.ALREADY_VOID),
    ]
