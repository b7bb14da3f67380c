"""Jittered exponential backoff for retryable failures: `Backoff`, the delays, and `Retries`,
the one loop of tries that sleeps them."""

from __future__ import annotations

import asyncio
import random


class Backoff:
    """Full jitter: each delay is uniform in [0, min(cap, base * 2**attempt)], so that it grows
    with each failure in a row (`reset` after a success) up to `cap`."""

    def __init__(self, base: float = 0.05, cap: float = 2.0, rng: random.Random | None = None):
        self.base, self.cap = base, cap
        self.attempt = 0
        self.rng = rng

    def next(self) -> float:
        ceiling = min(self.cap, self.base * 2**self.attempt)
        delay = self.rng.uniform(0, ceiling) if self.rng else random.uniform(0, ceiling)
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0


class Retries:
    """Up to `tries` tries, a growing backoff's delay slept before each but the first:

    async for _ in Retries(5):
        try:
            return await call()
        except Unavailable:
            continue   # the loop sleeps, then tries again
    raise GaveUp()     # after the last try, no sleep
    """

    def __init__(self, tries: int, base: float = 0.05, cap: float = 2.0) -> None:
        self.tries, self.tried = tries, 0
        self.backoff = Backoff(base, cap)

    def __aiter__(self) -> Retries:
        return self

    async def __anext__(self) -> int:
        if self.tried >= self.tries:
            raise StopAsyncIteration
        if self.tried:
            await asyncio.sleep(self.backoff.next())
        self.tried += 1
        return self.tried
