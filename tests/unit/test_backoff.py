"""The backoff grows with each failure in a row, up to its cap, and starts again after a reset;
`Retries` sleeps it between tries, never before the first or after the last."""

from __future__ import annotations

import asyncio
import random

import pytest

from infra.backoff import Backoff, Retries


class Highest(random.Random):
    """Draws the top of every range: the backoff's ceiling itself."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_the_delay_grows_to_its_cap_and_starts_again_after_a_reset() -> None:
    backoff = Backoff(base=0.1, cap=1.0, rng=Highest())
    assert [backoff.next() for _ in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    backoff.reset()
    assert backoff.next() == pytest.approx(0.1)


def test_a_drawn_delay_stays_within_its_ceiling() -> None:
    backoff = Backoff(base=0.05, cap=2.0)
    for attempt in range(12):
        assert 0 <= backoff.next() <= min(2.0, 0.05 * 2**attempt)


def test_retries_sleep_between_tries_only(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(asyncio, "sleep", sleep)

    async def tries() -> list[int]:
        return [n async for n in Retries(4, base=0.5, cap=0.5)]

    assert asyncio.run(tries()) == [1, 2, 3, 4]
    assert len(slept) == 3 and all(0 <= d <= 0.5 for d in slept)
