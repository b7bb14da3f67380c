"""Jittered exponential backoff for retryable failures, in its own object."""

from __future__ import annotations

import random


class Backoff:
    """Full jitter: each delay is uniform in [0, min(cap, base * 2**attempt)]."""

    def __init__(self, base: float = 0.05, cap: float = 2.0, rng: random.Random | None = None):
        self.base, self.cap = base, cap
        self.attempt = 0
        self.rng = rng or random.Random()

    def next(self) -> float:
        delay = self.rng.uniform(0, min(self.cap, self.base * 2**self.attempt))
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0
