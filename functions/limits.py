"""Limits on what a client controls that would otherwise cost the service more than the client:
how many Idempotency-Keys it may send per second (each can become a row in Postgres, kept for
IDEMPOTENCY_RETENTION_S)."""

from __future__ import annotations

import time
from collections.abc import Callable

MAX_CLIENTS = 10_000  # buckets kept before idle (full) ones are dropped


class KeyRate:
    """A token bucket per client: `rate` keys per second, bursts of up to a second's worth."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, max(1.0, rate), clock
        self.buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, when)

    def take(self, client: str) -> float:
        """0 if `client` may send one more key now; else the seconds until it may."""
        now = self.clock()
        tokens, when = self.buckets.get(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - when) * self.rate)
        if tokens < 1:
            return (1 - tokens) / self.rate
        self.buckets[client] = (tokens - 1, now)
        if len(self.buckets) > MAX_CLIENTS:
            self._forget_idle(now)
        return 0.0

    def _forget_idle(self, now: float) -> None:
        """Drop the buckets that have filled up again: forgetting them changes nothing."""
        full = self.burst / self.rate
        self.buckets = {c: b for c, b in self.buckets.items() if now - b[1] < full}
