"""What a batcher knows of the counters its frames name: their definitions, read once and kept a
while, and their floors (the highest value the audit trail holds for a period)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime

from infra.counters import Counter
from infra.ports import Counters, Frames
from infra.spans import Span

# Counter definitions are read once and kept this long: only a counter's retention changes
# (PATCH /counters/{name}), and its audit rows follow within this time.
COUNTERS_FRESH_S = 30.0


class Known:
    def __init__(self, counters: Counters, frames: Frames, clock: Callable[[], datetime]) -> None:
        self.store, self.frames, self.clock = counters, frames, clock
        self.counters: dict[str, Counter] = {}
        self._read = time.monotonic()  # when `counters` was last emptied
        # per (counter, period): the highest value the trail holds (Basis.floors), and the
        # counters whose floor was read since `counters` was last emptied
        self.floors: dict[tuple[str, str], int] = {}
        self._floored: set[str] = set()

    async def learn(self, names: set[str]) -> None:
        """Have the definitions of `names` (those that exist) and their current floors."""
        if time.monotonic() - self._read > COUNTERS_FRESH_S:
            self.counters.clear()  # a counter's retention may have changed
            self._floored.clear()  # and its floor is read again (a new period may have begun)
            self._read = time.monotonic()
        missing = [n for n in names if n not in self.counters]
        if missing:
            self.counters.update(await self.store.get_many(missing))
        await self._floor([n for n in names if n not in self._floored])

    async def _floor(self, names: list[str]) -> None:
        """Read the highest value the audit trail holds for the current period of each of
        `names`: a batcher never hands out a value at or below it, whatever `counter_values`
        says (moved back by hand, it would hand them out again)."""
        now = self.clock()
        pairs = sorted((n, self.counters[n].period(now)) for n in names if n in self.counters)
        if not pairs:
            return
        for pair, top in (await self.frames.highest(pairs)).items():
            self._raise(pair, top)
        self._floored.update(names)

    def taken(self, spans: Iterable[Span]) -> None:
        """Values a frame of this batcher handed out: each period's floor rises to its last."""
        for name, period, _, last in spans:
            self._raise((name, period), last)

    def _raise(self, pair: tuple[str, str], top: int) -> None:
        if top > self.floors.get(pair, top - 1):
            self.floors[pair] = top
