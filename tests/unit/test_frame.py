from __future__ import annotations

import pytest

from batcher.frame import Frame, IllegalStep, State
from infra.ports import Entry
from infra.wire import Record


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
