"""A batcher frozen inside a frame's transaction (SIGSTOP with its counter rows locked), then
woken. Postgres ends its idle transaction after IDLE_IN_TRANSACTION_S, so the batcher that takes
its shard over after LEASE_TTL_S is not stuck behind the locks; the woken one's frame is refused
by the epoch fence. Every value is handed out once, in real-time order."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest

from infra.adapters.postgres import IDLE_IN_TRANSACTION_S
from infra.settings import Settings
from numerator.stack import EdgeStack
from tests.asgi import asgi_client
from tests.aws import resources
from tests.checks import Answer, assert_guarantees
from tests.e2e.service import BatcherProcess

pytestmark = pytest.mark.slow

TTL = 3.0


async def take(client: httpx.AsyncClient, counter: str) -> tuple[int, Answer | None]:
    sent = time.monotonic()
    response = await client.post(f"/counters/{counter}/next")
    if response.status_code != 200:
        return response.status_code, None
    value = response.json()["value"]
    return 200, Answer(counter, value, value, sent, time.monotonic())


async def test_a_batcher_frozen_in_its_transaction_is_taken_over_and_fenced_out(
    aws_endpoint: str, settings: Settings, tmp_path: Path
) -> None:
    quick = settings.but(lease_ttl_s=TTL, read_interval_ms=50.0, reply_timeout_s=25.0)
    with resources(quick) as (own, _):
        env = {k: v for k, v in own.to_env().items() if v}
        frozen = BatcherProcess({**env, "NUMERATOR_PAUSE_IN_FRAME_S": "12"}, tmp_path / "a")
        other: BatcherProcess | None = None
        try:
            await frozen.ready()
            async with (
                EdgeStack(own.but(front_frame_ms=0)) as edge,
                asgi_client(edge.app(), timeout=60) as client,
            ):
                assert (await client.post("/counters", json={"name": "f"})).is_success
                first = asyncio.create_task(take(client, "f"))
                await frozen.said("inside the frame's transaction", within=30)
                frozen.process.send_signal(signal.SIGSTOP)
                stopped = time.monotonic()
                other = BatcherProcess(env, tmp_path / "b")
                await other.ready()
                answers = [await first]
                taken_over = time.monotonic() - stopped
                answers += [await take(client, "f") for _ in range(5)]
                frozen.process.send_signal(signal.SIGCONT)
                await frozen.said("has a newer owner than epoch 1; dropping the frame", within=30)
                answers += [await take(client, "f") for _ in range(5)]
            takeovers = other.metric("numerator_lease_takeovers_total")
        finally:
            frozen.process.send_signal(signal.SIGCONT)
            codes = [frozen.stop()] + ([other.stop()] if other else [])
    statuses = [status for status, _ in answers]
    print(f"frozen in its transaction: the first request answered {taken_over:.1f} s later")
    assert statuses == [200] * 11, statuses
    assert_guarantees([a for _, a in answers if a is not None])
    assert takeovers >= 1
    # The lease's time, then the idle transaction's end, then a read and a frame: without the
    # idle timeout the new owner waits on the frozen one's row locks for as long as it sleeps.
    assert taken_over < TTL + IDLE_IN_TRANSACTION_S + 8, taken_over
    assert codes == [0, 0], "both stop cleanly on SIGTERM"
