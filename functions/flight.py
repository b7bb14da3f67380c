"""The requests an edge holds, by the second they began: so that the edge can say, every time it
says it is alive, since when all of its requests were answered (the ledger's `unsure` values)."""

from __future__ import annotations

import time
from collections.abc import Callable

MARGIN_S = 0.05
"""A request ended (its answer handed to the HTTP server) this little before a mark may still be
on its way to its client: the server writes it to the socket within milliseconds."""


class Flight:
    """Requests counted per epoch (the time between two marks), two integer steps each: the
    earliest epoch that still holds one tells how far back an answer may still be owed."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.epoch = 0
        self.began = {0: clock()}
        self.holding = {0: 0}
        self.moved = False
        """Whether a request began or ended since the last mark: if so, the next mark may differ
        (a request that ends lets it move on), so the edge says it at its next SETTLE_EVERY_S."""

    def begin(self) -> int:
        """A request begins; the epoch to end it in."""
        epoch = self.epoch
        self.holding[epoch] += 1
        self.moved = True
        return epoch

    def end(self, epoch: int) -> None:
        self.holding[epoch] -= 1
        self.moved = True

    def mark(self) -> float:
        """Open a new epoch; the moment (Unix seconds) before which every request this edge
        began has been answered, less MARGIN_S (an answer being written as its request ends)."""
        now = self.clock()
        self.moved = False
        held = [self.began[e] for e, n in self.holding.items() if n]
        for epoch in [e for e, n in self.holding.items() if not n]:
            del self.holding[epoch], self.began[epoch]
        self.epoch += 1
        self.began[self.epoch], self.holding[self.epoch] = now, 0
        return min([now - MARGIN_S, *held])
