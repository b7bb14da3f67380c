"""FRAME_POLICY=auto (group commit) and MAX_FRAMES_PER_S on a real Postgres: values stay unique
and ordered, and a cap on transactions holds, with frames growing instead."""

from __future__ import annotations

import asyncio
import time

from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client
from tests.checks import Answer, assert_guarantees, assert_ordered


async def hammer(
    settings: Settings, name: str, seconds: float
) -> tuple[list[Answer], EmbeddedStack, float]:
    """16 clients taking values of counter `name` for `seconds`."""
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        assert (await client.post("/counters", json={"name": name})).status_code == 201
        answers: list[Answer] = []
        began = time.monotonic()

        async def loop() -> None:
            while time.monotonic() - began < seconds:
                sent = time.monotonic()
                response = await client.post(f"/counters/{name}/next")
                assert response.status_code == 200, response.text
                value = response.json()["value"]
                answers.append(Answer(name, value, value, sent, time.monotonic()))

        await asyncio.gather(*(loop() for _ in range(16)))
        return answers, stack, time.monotonic() - began


async def test_group_commit_keeps_values_unique_and_ordered(settings: Settings, name: str) -> None:
    auto = settings.but(frame_policy="auto", back_frame_ms=10.0)
    answers, _, _ = await hammer(auto, name, 1.0)
    assert len(answers) > 100
    assert_guarantees(answers)
    assert_ordered(answers)


async def test_a_cap_on_transactions_holds_and_frames_grow(settings: Settings, name: str) -> None:
    capped = settings.but(frame_policy="auto", max_frames_per_s=20.0)
    answers, stack, took = await hammer(capped, name, 1.5)
    frames = stack.metrics.frames_committed.value
    assert frames <= 20 * took + 2, f"{frames} transactions in {took:.2f}s over a cap of 20/s"
    assert len(answers) / frames >= 4  # 16 clients share each capped frame
    assert_guarantees(answers)
