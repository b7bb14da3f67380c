from bench import histogram
from bench.load import Result
from bench.schedule import Schedule
from bench.steps import steps


def result(seconds: dict[int, tuple[int, float]]) -> Result:
    """`seconds`: second → (answers, latency in ms of each)."""
    out = Result()
    for at, (answers, ms) in seconds.items():
        second = out.second(at)
        second.ok = answers
        for _ in range(answers):
            histogram.record(second.latency, ms / 1000)
    return out


def test_each_constant_step_is_summarised_without_its_first_second() -> None:
    schedule = Schedule.parse("const(100, 3s) const(1000, 3s)")
    # second 0 and 3 are the settling seconds: their slow answers must not count
    run = result({0: (100, 50), 1: (100, 2), 2: (100, 2), 3: (1000, 80), 4: (1000, 5), 5: (800, 5)})
    service = [
        {"t": 1.5, "transactions": 90.0},
        {"t": 4.5, "transactions": 40.0},
        {"t": 5.5, "transactions": 60.0},
    ]
    rows = steps(schedule, run, service)
    assert [r["offered_rps"] for r in rows] == [100, 1000]
    assert rows[0]["achieved_rps"] == 100 and rows[1]["achieved_rps"] == 900
    assert 1.9 < rows[0]["latency_p99_ms"] < 2.1 and 4.9 < rows[1]["latency_p99_ms"] < 5.1
    assert 1.9 < rows[0]["latency_mean_ms"] < 2.1 and 4.9 < rows[1]["latency_mean_ms"] < 5.1
    assert rows[0]["transactions_per_s"] == 90.0 and rows[1]["transactions_per_s"] == 50.0


def test_a_schedule_without_two_steps_has_no_sweep() -> None:
    assert steps(Schedule.parse("const(100, 5s)"), result({1: (100, 1)}), []) == []
    assert steps(Schedule.parse("line(1, 100, 5s) line(100, 1, 5s)"), result({}), []) == []
