"""What records took lately, by reply key, for as long as their edges may still give up on them:
a cancel that comes after its record was applied voids what it took."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence

from batcher.allocation import decode_replies
from batcher.handout import Taking
from infra.counters import Counter
from infra.ports import Frames, Lease
from infra.spans import Span

CANCEL_MARGIN_S = 10.0  # a cancel is put right after its edge gives up; allow it this to arrive


class Recent:
    def __init__(self, frames: Frames, reply_timeout_s: float) -> None:
        self.frames = frames
        self.within = reply_timeout_s + CANCEL_MARGIN_S
        self.taken: dict[str, Span] = {}
        self._since: deque[tuple[float, Sequence[Taking]]] = deque()  # oldest first

    def remember(self, taken: Sequence[Taking]) -> None:
        """Keep what each record took for as long as its edge may still give up on it (its
        reply timeout, and a margin for the cancel to travel)."""
        now = time.monotonic()
        if taken:
            self.taken.update(taken)
            self._since.append((now, taken))
        cutoff = now - self.within
        while self._since and self._since[0][0] < cutoff:
            for one in self._since.popleft()[1]:
                self.taken.pop(one.key, None)

    async def with_before(
        self, lease: Lease, keys: set[str], counters: Mapping[str, Counter]
    ) -> Mapping[str, Span]:
        """What records took, with those of `keys` (cancels this batcher does not know of) that
        the shard's previous owner applied, read from the replies the shard's frames kept."""
        unknown = {key for key in keys if key not in self.taken}
        if not unknown:
            return self.taken
        found: dict[str, Span] = {}
        for raw in await self.frames.held_since(lease.stream, lease.shard, self.within):
            for reply in decode_replies(raw):
                counter = counters.get(reply.counter)
                if reply.key in unknown and reply.ok and reply.day and counter is not None:
                    period = counter.reset.period(reply.day)
                    found[reply.key] = Span(reply.counter, period, reply.first, reply.last)
        return {**self.taken, **found}
