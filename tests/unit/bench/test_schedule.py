from __future__ import annotations

from itertools import pairwise

import pytest

from bench.schedule import Schedule, ScheduleError, duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10), ("500ms", 0.5), ("2m", 120), ("1h", 3600), ("3", 3), (" 1.5s ", 1.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


def test_const_sends_evenly() -> None:
    times = list(Schedule.parse("const(200, 10s)").times())
    assert len(times) == 2000
    assert times[:3] == pytest.approx([0, 0.005, 0.01])
    assert times[-1] < 10


def test_line_rises_and_counts_the_area() -> None:
    schedule = Schedule.parse("line(0, 100, 10s)")
    times = list(schedule.times())
    assert len(times) == 500  # the area under the ramp
    gaps = [b - a for a, b in pairwise(times)]
    assert gaps[10] > gaps[-10]  # sends get closer as the rate rises
    assert schedule.rate_at(5) == pytest.approx(50)


def test_step_holds_each_level() -> None:
    schedule = Schedule.parse("step(10, 30, 10, 2s)")
    assert [s.start for s in schedule.segments] == [10, 20, 30]
    assert schedule.seconds == 6
    assert schedule.requests == 20 + 40 + 60


def test_terms_concatenate_in_order() -> None:
    schedule = Schedule.parse("const(10, 1s) line(10, 20, 1s), const(20,1s)")
    times = list(schedule.times())
    assert len(times) == 10 + 15 + 20
    assert times == sorted(times)
    assert 1 <= times[10] < 1.2 and 2 <= times[25] < 2.1


@pytest.mark.parametrize(
    "text",
    [
        "",
        "const(10)",
        "const(x, 1s)",
        "const(10, 1y)",
        "const(-1, 1s)",
        "ramp(1, 2, 3s)",
        "const(10, 1s) junk",
        "step(1, 5, 0, 1s)",
        "line(1, 2)",
        "const(10, 0s)",
    ],
)
def test_bad_schedules_say_what_is_wrong(text: str) -> None:
    with pytest.raises(ScheduleError):
        Schedule.parse(text)
