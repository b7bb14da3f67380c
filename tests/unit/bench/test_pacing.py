"""Open-model pacing against a fake clock: on time when the generator keeps up, and missed sends
counted (not hidden) when it does not."""

from __future__ import annotations

from bench.pacing import Pacer


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def test_releases_each_request_at_its_time() -> None:
    clock = FakeClock()
    pacer = Pacer([0.0, 0.1, 0.25, 0.25, 1.0], clock, clock.sleep)
    released = [(r.n, r.due, clock.now) async for r in pacer.releases(clock.now)]
    assert [n for n, _, _ in released] == [0, 1, 2, 3, 4]
    assert [round(at - 100, 6) for _, _, at in released] == [0.0, 0.1, 0.25, 0.25, 1.0]
    assert pacer.missed == 0


async def test_a_slow_generator_is_reported_as_missed_sends() -> None:
    clock = FakeClock()
    pacer = Pacer([i * 0.001 for i in range(100)], clock, clock.sleep, tolerance=0.010)
    lateness = []
    async for release in pacer.releases(clock.now):
        lateness.append(release.late)
        clock.now += 0.002  # each send costs 2 ms: the generator falls behind a 1 ms schedule
    assert pacer.missed > 0
    assert pacer.missed == sum(1 for late in lateness if late > 0.010)
    assert pacer.worst >= max(lateness) > 0.09


async def test_sends_do_not_wait_for_answers() -> None:
    """Open model: the pacer never waits for anything but the clock."""
    clock = FakeClock()
    pacer = Pacer([0.0, 0.001, 0.002], clock, clock.sleep)
    releases = [r async for r in pacer.releases(clock.now)]
    assert clock.now - 100 < 0.003
    assert len(releases) == 3
