"""What records took lately, by reply key, for as long as their edges may still give up on them:
a cancel that comes after its record was applied voids what it took."""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Iterator, Mapping, Sequence

from batcher.allocation import decode_replies
from batcher.handout import Taking
from infra.counters import Counter
from infra.ports import Frames, Lease
from infra.spans import Span

CANCEL_MARGIN_S = 10.0  # a cancel is put right after its edge gives up; allow it this to arrive


class RecentSpans(Mapping[str, Span]):
    """Spans by reply key, kept in columns (lists of strings, arrays of ints, a dict of key to
    row) so that no entry is an object the cyclic garbage collector tracks: a hot counter's
    batcher holds every record's span for tens of seconds, tens of thousands of them, and a
    `Span` each (a NamedTuple stays tracked) made every young collection walk them all for
    nothing (docs/performance.md). Rows are appended and forgotten oldest first."""

    def __init__(self) -> None:
        self._row: dict[str, int] = {}  # holds only strings and ints: untracked
        self._keys: list[str] = []
        self._counters: list[str] = []
        self._periods: list[str] = []
        self._firsts = array("q")
        self._lasts = array("q")
        self._base = 0  # the number of the columns' first row
        self._head = 0  # the columns' rows before this one are forgotten

    @property
    def end(self) -> int:
        """The number the next row will have."""
        return self._base + len(self._keys)

    def add(self, taken: Sequence[tuple[str, Span]]) -> None:
        row = self.end
        for key, (counter, period, first, last) in taken:
            self._row[key] = row
            row += 1
            self._keys.append(key)
            self._counters.append(counter)
            self._periods.append(period)
            self._firsts.append(first)
            self._lasts.append(last)

    def forget(self, until: int) -> None:
        """Forget the rows before row `until` (a key taken again since keeps its newer row)."""
        stop = until - self._base
        for at in range(self._head, stop):
            key = self._keys[at]
            if self._row.get(key) == self._base + at:
                del self._row[key]
        self._head = max(self._head, stop)
        if self._head * 2 > len(self._keys):  # the columns' forgotten half goes, in one move
            for column in (self._keys, self._counters, self._periods, self._firsts, self._lasts):
                del column[: self._head]
            self._base += self._head
            self._head = 0

    def __getitem__(self, key: str) -> Span:
        at = self._row[key] - self._base
        return Span(self._counters[at], self._periods[at], self._firsts[at], self._lasts[at])

    def __contains__(self, key: object) -> bool:
        return key in self._row

    def __iter__(self) -> Iterator[str]:
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)


class Recent:
    def __init__(self, frames: Frames, reply_timeout_s: float) -> None:
        self.frames = frames
        self.within = reply_timeout_s + CANCEL_MARGIN_S
        self.taken = RecentSpans()
        self._since: deque[tuple[float, int]] = deque()  # (when, rows by then), oldest first

    def remember(self, taken: Sequence[Taking]) -> None:
        """Keep what each record took for as long as its edge may still give up on it (its
        reply timeout, and a margin for the cancel to travel)."""
        now = time.monotonic()
        if taken:
            self.taken.add(taken)
            self._since.append((now, self.taken.end))
        cutoff = now - self.within
        while self._since and self._since[0][0] < cutoff:
            self.taken.forget(self._since.popleft()[1])

    async def with_before(
        self, lease: Lease, keys: set[str], counters: Mapping[str, Counter]
    ) -> Mapping[str, Span]:
        """What records took, with those of `keys` (a frame's cancels) this batcher does not
        know of that the shard's previous owner applied, read from the replies the shard's
        frames kept: then only `keys`' own, since a frame looks up only its cancels (a copy of
        every span remembered would cost a lookup each, tens of thousands, per such frame)."""
        unknown = {key for key in keys if key not in self.taken}
        if not unknown:
            return self.taken
        found = {key: self.taken[key] for key in keys - unknown}
        for raw in await self.frames.held_since(lease.stream, lease.shard, self.within):
            for reply in decode_replies(raw):
                counter = counters.get(reply.counter)
                if reply.key in unknown and reply.ok and reply.day and counter is not None:
                    period = counter.reset.period(reply.day)
                    found[reply.key] = Span(reply.counter, period, reply.first, reply.last)
        return found
