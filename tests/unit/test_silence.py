"""When the batcher chains an edge's end as dead (batcher/chores.py `Silence`): after MARK_DEAD_S
of silence, or, just after an outage of Postgres, of silence outside it."""

from __future__ import annotations

from batcher.chores import MARK_DEAD_S, Silence


def test_without_an_outage_an_edge_is_dead_after_the_silence_alone() -> None:
    silence = Silence(MARK_DEAD_S)
    for now in (0.0, 1.0, 2.0):
        assert silence.dead_after(now) == MARK_DEAD_S
        silence.answered(now)


def test_an_outage_is_not_counted_as_an_edges_silence() -> None:
    silence = Silence(30.0)
    silence.answered(100.0)  # Postgres last answered at 100, then went away
    for now in (101.0, 150.0, 280.0):
        silence.failed(now)
    # The first try back counts the outage so far (180 s since the last answer) as no silence.
    assert silence.dead_after(280.0) == 30.0 + 180.0
    silence.answered(280.0)
    # An edge last seen at 99.9 has been silent 1.1 s before the outage and 10 s after it.
    assert silence.dead_after(290.0) > 290.0 - 99.9
    # 30 s after the outage its length no longer counts: a silent edge is dead.
    assert silence.dead_after(310.0) == 30.0


def test_an_outage_from_the_start_counts_from_the_first_try() -> None:
    silence = Silence(30.0)
    silence.failed(5.0)
    silence.failed(65.0)
    assert silence.dead_after(70.0) == 30.0 + 65.0
