from __future__ import annotations

import pytest

from batcher.frame import Frame, IllegalStep, State
from infra.ports import Entry
from infra.wire import Cancel, Record


def entry(seq: int, deadline: float = 0.0) -> Entry:
    return Entry("s", str(seq), Record(f"k{seq}", "c", deadline=deadline))


def test_frame_moves_open_applied_published() -> None:
    frame = Frame([entry(1)])
    frame.add([entry(2)])
    assert frame.last_sequence == "2"
    frame.applied([])
    assert frame.state is State.APPLIED
    frame.published()
    assert frame.state is State.PUBLISHED


def test_frame_refuses_illegal_steps() -> None:
    frame = Frame([entry(1)])
    with pytest.raises(IllegalStep):
        frame.published()
    frame.applied([])
    with pytest.raises(IllegalStep):
        frame.add([entry(2)])
    with pytest.raises(IllegalStep):
        frame.applied([])
    frame.published()
    with pytest.raises(IllegalStep):
        frame.published()


def test_drop_takes_out_records_past_the_cutoff() -> None:
    frame = Frame([entry(1, deadline=10), entry(2, deadline=30), entry(3)])
    dropped = frame.drop(20)
    assert [r.key for r in dropped] == ["k1"]
    assert [e.sequence for e in frame.entries] == ["2", "3"]


def test_a_fixed_frame_collects_for_what_is_left_of_back_frame_ms() -> None:
    from batcher.frame import Policy, collect_for

    assert collect_for(Policy.FIXED, 0.010, waited=0.003, since_commit=9, gap=0) == 0.007
    assert collect_for(Policy.FIXED, 0.010, waited=0.050, since_commit=9, gap=0) == 0
    assert collect_for(Policy.FIXED, 0.010, waited=-5.0, since_commit=9, gap=0) == 0.010


def test_an_auto_frame_closes_once_the_store_is_free_and_the_gap_has_passed() -> None:
    from batcher.frame import Policy, collect_for

    # the previous transaction ended long ago: nothing to wait for
    assert collect_for(Policy.AUTO, 0.010, waited=0.0, since_commit=1.0, gap=0.0005) == 0
    # it just ended: wait out the rest of the gap, never past BACK_FRAME_MS
    assert collect_for(Policy.AUTO, 0.010, waited=0.0, since_commit=0.0002, gap=0.0005) == (
        pytest.approx(0.0003)
    )
    assert collect_for(Policy.AUTO, 0.010, waited=0.0099, since_commit=0, gap=0.005) == (
        pytest.approx(0.0001)
    )


def test_a_cap_on_transactions_holds_frames_apart_whatever_the_policy() -> None:
    from batcher.frame import Policy, collect_for

    for policy in Policy:
        wait = collect_for(policy, 0.010, 0.0, 1.0, 0.0, spacing=0.1, since_start=0.02)
        assert wait == pytest.approx(0.08)


def test_a_frame_reads_on_after_what_it_dropped() -> None:
    """Records given up leave the frame, not the stretch of the shard it has read: the shard is
    read on after them (`read_to`), so that a frame emptied through an outage does not read them
    again."""
    frame = Frame([entry(1, deadline=10)])
    frame.add([entry(2, deadline=10), entry(3, deadline=30)])
    frame.add([])
    assert frame.drop(20) and frame.drop(40)
    assert len(frame) == 0 and frame.read_to == "3"


def test_take_through_splits_a_frame_at_a_committed_try() -> None:
    """What a try committed (up to its checkpoint) leaves the frame; what came after stays."""
    frame = Frame([entry(8), entry(9)])
    frame.add([entry(10), entry(11)])
    assert [e.sequence for e in frame.take_through("9")] == ["8", "9"]
    assert [e.sequence for e in frame.entries] == ["10", "11"]
    assert frame.last_sequence == "11" and frame.read_to == "11"


def test_forget_takes_out_the_records_given_up_and_not_their_cancels() -> None:
    """A record this batcher gave up, read again by its loop that took the shard over, is
    never allocated: its cancel behind it would void values a client may have been answered."""
    frame = Frame([entry(1), entry(2), Entry("s", "3", Cancel("k1", "c", None, ""))])
    frame.forget({"k1"})
    assert [e.sequence for e in frame.entries] == ["2", "3"]
    assert frame.read_to == "3"
