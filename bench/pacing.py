"""Open-model pacing: each request is released at its scheduled time, whether or not earlier ones
have answered. A release later than `tolerance` after its time is a missed send — the generator
could not keep up — and is counted, never hidden."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

TOLERANCE_S = 0.010
SPIN_S = 0.0005  # closer than this to a request's time, release it rather than sleep


@dataclass
class Release:
    n: int
    due: float  # the clock's time the request was scheduled for
    late: float  # seconds after `due` it was released


class Pacer:
    def __init__(
        self,
        times: Iterable[float],
        clock: Clock,
        sleep: Sleep,
        tolerance: float = TOLERANCE_S,
    ) -> None:
        self.times, self.clock, self.sleep, self.tolerance = times, clock, sleep, tolerance
        self.missed = 0
        self.worst = 0.0
        self.start = 0.0

    async def releases(self, start: float) -> AsyncIterator[Release]:
        """Yield every request at its time; `start` is the clock time of offset 0."""
        self.start = start
        for n, offset in enumerate(self.times):
            due = start + offset
            wait = due - self.clock()
            if wait > SPIN_S:
                await self.sleep(wait)
            late = max(0.0, self.clock() - due)
            if late > self.tolerance:
                self.missed += 1
            self.worst = max(self.worst, late)
            yield Release(n, due, late)
