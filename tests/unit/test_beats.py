"""Read beats (infra/adapters/beats.py): when a batcher reads a shard and when an edge reads the
reply, as arithmetic on a fake clock; the adapters' own use of it runs on moto in
tests/integration (test_stream_contract.py, test_replies_contract.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infra.adapters.beats import (
    KEYS,
    SLACK_S,
    Phases,
    Wall,
    beat,
    first_read,
    next_read,
    phase_of,
    read_again,
)

R = 0.2  # READ_INTERVAL_MS 200
T = 1_764_000_000.0  # a beat: a Unix time that is a whole multiple of R


def at(t: float) -> object:
    """`t`, to a microsecond (pytest.approx's relative default is half an hour at Unix times)."""
    return pytest.approx(t, rel=0, abs=1e-6)


def test_a_beat_is_the_first_multiple_of_the_interval_at_or_after_a_time() -> None:
    assert beat(T, R) == at(T)
    assert beat(T + 0.001, R) == at(T + R)
    assert beat(T + 0.199, R) == at(T + R)
    assert beat(T - 0.001, R) == at(T)
    assert beat(T + 3 * R, R) == at(T + 3 * R)  # not one further for rounding


@given(st.floats(1.6e9, 2.0e9), st.sampled_from([0.02, 0.05, 0.2, 0.25, 1.0]))
def test_every_beat_is_a_multiple_of_the_interval_less_than_one_interval_on(
    t: float, interval: float
) -> None:
    b = beat(t, interval)
    assert t - 1e-6 <= b < t + interval + 1e-6  # Unix times are floats to a 4e-7 s
    assert abs(b / interval - round(b / interval)) < 1e-4


def test_a_shard_is_read_on_the_first_beat_a_whole_interval_after_its_last_read() -> None:
    # the last read began at T + 0.05 (it was behind): not the beat at T + R, the next one
    assert next_read(now=T + 0.1, earliest=T + 0.05 + R, interval=R) == at(T + 2 * R)
    # the last read began on its beat: the next beat
    assert next_read(now=T + 0.1, earliest=T + R, interval=R) == at(T + R)


def test_a_read_that_began_late_makes_the_next_as_late_within_the_slack_then_skips() -> None:
    """Never sooner than the interval after the last read: a read late within SLACK_S makes
    the next as late, on the next beat; later than that, the next read waits a beat more."""
    late = SLACK_S * 0.9
    assert next_read(T + 0.1, T + late + R, R) == at(T + R + late)
    later = SLACK_S * 1.1
    assert next_read(T + 0.1, T + later + R, R) == at(T + 2 * R)


def test_a_batcher_past_its_beat_or_behind_reads_as_soon_as_the_interval_allows() -> None:
    # the beat at T + R has passed (a long commit): at once
    assert next_read(now=T + R + 0.05, earliest=T + R, interval=R) == T + R + 0.05
    # MillisBehindLatest > 0: at the end of the interval, not the beat
    assert next_read(T + 0.1, T + 0.13 + R, R, behind=True) == at(T + 0.13 + R)
    # and never sooner than the interval, behind or not: AWS allows five reads a second
    assert next_read(T + 0.1, T + 0.3, R, behind=True) == at(T + 0.3)
    assert next_read(T + 0.1, T + 0.1, 0.0) == T + 0.1  # no interval, no beats


@given(
    st.floats(0, 5),
    st.floats(0, 5),
    st.sampled_from([0.02, 0.2, 1.0]),
    st.booleans(),
)
def test_a_shard_is_never_read_sooner_than_the_interval_nor_before_now(
    now: float, last: float, interval: float, behind: bool
) -> None:
    when = next_read(T + now, T + last + interval, interval, behind)
    assert when >= T + last + interval and when >= T + now
    if not behind:  # and at most one beat later than it may
        assert when < max(T + now, T + last + interval) + interval


def test_an_edge_reads_its_reply_the_lag_after_the_beat_that_reads_its_record() -> None:
    lag = 0.05
    assert first_read(T + 0.01, R, lag) == at(T + R + lag)
    # a put that returned just before a beat: that beat's read takes the record in
    assert first_read(T + R - 0.001, R, lag) == at(T + R + lag)
    assert first_read(T, R, lag) == at(T + lag)


def test_a_reply_not_found_is_read_again_a_beat_later_at_the_same_lag() -> None:
    due = T + 0.05
    assert read_again(due, now=due + 0.003, interval=R) == at(due + R)
    assert read_again(due, now=due - 0.001, interval=R) == at(due + R)  # read early
    # a read that came late (a busy loop): the next beat still ahead, not one long past
    assert read_again(due, now=due + R + 0.01, interval=R) == at(due + 2 * R)


def test_an_edge_whose_reply_never_comes_reads_once_a_beat() -> None:
    """Until its deadline (5 s here): from the first beat after the put, 24 reads."""
    due, now, reads = first_read(T + 0.07, R, 0.05), T + 0.07, 0
    while due < T + 5:
        now = due
        reads += 1
        due = read_again(due, now, R)
    assert reads == 24


def test_the_wall_clock_is_one_offset_from_the_monotonic_for_a_while() -> None:
    """Times worked out within `refresh` agree to the bit: keys of one beat share a read."""
    wall, mono = [T + 0.5], [100.0]
    clock = Wall(refresh=10, wall=lambda: wall[0], monotonic=lambda: mono[0])
    assert clock.offset() == T + 0.5 - 100.0
    wall[0] += 0.003  # a thread switch between two readings: the offset stays
    mono[0] += 5
    assert clock.offset() == T + 0.5 - 100.0
    mono[0] += 5  # refresh seconds on: read afresh
    assert clock.offset() == at(T + 0.503 - 110.0)


def test_phased_beats_are_the_interval_apart_from_each_shards_phase() -> None:
    """READ_BEATS=phased: a shard's phase is where its hash key range starts, as a share of the
    key space, times the interval; its reads and its replies' reads keep to it."""
    assert phase_of(0, R) == 0.0
    assert phase_of(KEYS // 4, R) == pytest.approx(0.05)
    assert beat(T + 0.01, R, 0.05) == at(T + 0.05)
    assert beat(T + 0.05, R, 0.05) == at(T + 0.05)
    assert beat(T + 0.051, R, 0.05) == at(T + 0.25)
    assert first_read(T + 0.01, R, 0.05, phase=0.15) == at(T + 0.2)
    assert next_read(T + 0.06, T + 0.06, R, phase=0.1) == at(T + 0.1)


def test_a_lone_record_is_put_on_the_shard_read_first_after_its_put_returns() -> None:
    quarter = KEYS // 4
    phases = Phases(R, [(f"shard-{n}", n * quarter) for n in (2, 0, 3, 1)])
    assert len(phases) == 4
    assert phases.of == pytest.approx(
        {"shard-0": 0, "shard-1": 0.05, "shard-2": 0.1, "shard-3": 0.15}
    )
    assert phases.choose(T + 0.06) == (str(2 * quarter), pytest.approx(0.1))
    assert phases.choose(T + 0.05) == (str(quarter), pytest.approx(0.05))  # a beat is its own
    assert phases.choose(T + 0.17) == ("0", 0.0)  # none later in this interval: the next's first
    with pytest.raises(ValueError):
        Phases(R).choose(T)


def test_a_shard_avoided_is_passed_over_for_the_one_read_after_it_unless_all_are() -> None:
    """A shard whose replies are overdue (its batcher frozen) is avoided: a put goes to the
    shard read next after it, round to the next interval's first; with every shard avoided,
    avoiding means nothing and the first is taken as before."""
    quarter = KEYS // 4
    phases = Phases(R, [(f"shard-{n}", n * quarter) for n in range(4)])
    keys = [str(n * quarter) for n in range(4)]
    assert phases.choose(T + 0.06, {keys[2]}) == (keys[3], pytest.approx(0.15))
    assert phases.choose(T + 0.12, {keys[3]}) == ("0", 0.0)  # round to the next interval
    assert phases.choose(T + 0.12, {keys[3], "0"}) == (keys[1], pytest.approx(0.05))
    assert phases.choose(T + 0.06, set(keys)) == (keys[2], pytest.approx(0.1))
