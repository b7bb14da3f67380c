"""Postgres restarts under load: clients see 503/504 during the outage, then success, and no value
is ever handed out twice. The service recovers without a restart of its own."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from infra.settings import Settings
from numerator.stack import BatcherStack, EdgeStack, EmbeddedStack
from tests.asgi import asgi_client
from tests.conftest import temporary_pgserver
from tests.postgres import start, stop

pytestmark = pytest.mark.slow


@pytest.fixture
def own_postgres() -> Iterator[Any]:
    """A Postgres of this test's own, so that stopping it disturbs no other test."""
    with temporary_pgserver() as server:
        yield server


async def test_postgres_restart_mid_load(own_postgres: Any) -> None:
    settings = Settings.of().but(
        database_url=own_postgres.get_uri(), back_frame_ms=5, reply_timeout_s=2.0
    )
    async with EmbeddedStack(settings) as stack:
        await outage(stack.app(), own_postgres)


async def test_postgres_restart_mid_load_on_the_aws_path(
    own_postgres: Any, aws: tuple[Settings, Any]
) -> None:
    """The same outage with the edge on Kinesis and DynamoDB and the batcher on its own."""
    settings = aws[0].but(database_url=own_postgres.get_uri(), back_frame_ms=5, reply_timeout_s=2.0)
    async with BatcherStack(settings), EdgeStack(settings) as edge:
        await outage(edge.app(), own_postgres)


async def outage(app: Any, own_postgres: Any) -> None:
    """20 client loops on one hot counter; Postgres stopped for 3 s, then started again."""
    statuses: Counter[int] = Counter()
    values: list[int] = []
    timeline: list[tuple[float, int]] = []
    async with asgi_client(app, timeout=30) as client:
        assert (await client.post("/counters", json={"name": "hot"})).status_code == 201
        running = True

        async def loop() -> None:
            while running:
                response = await client.post("/counters/hot/next")
                statuses[response.status_code] += 1
                timeline.append((time.monotonic(), response.status_code))
                if response.status_code == 200:
                    values.append(response.json()["value"])
                else:
                    assert response.headers["content-type"] == "application/problem+json"
                    if response.status_code == 503:
                        assert "retry-after" in response.headers
                    await asyncio.sleep(0.05)

        loops = [asyncio.create_task(loop()) for _ in range(20)]
        await asyncio.sleep(1.0)
        await asyncio.to_thread(stop, own_postgres)
        down = time.monotonic()
        await asyncio.sleep(3.0)
        created = await client.post("/counters", json={"name": "during-outage"})
        assert created.status_code == 503, created.text
        health = await client.get("/healthz")
        assert health.status_code == 503
        restarting = time.monotonic()
        await asyncio.to_thread(start, own_postgres)
        up = time.monotonic()
        await asyncio.sleep(4.0)
        running = False
        await asyncio.gather(*loops)
        assert (await client.get("/healthz")).status_code == 200
    print(f"statuses over the restart: {dict(statuses)}")
    assert set(statuses) <= {200, 503, 504}, statuses
    assert statuses[503] + statuses[504] > 0, "the outage was not seen"
    assert len(values) == len(set(values)), "a value was handed out twice"
    after = [status for at, status in timeline if at > up + 2.5]
    assert after and all(s == 200 for s in after), "the service did not recover"
    during = [status for at, status in timeline if down + 0.5 < at < restarting]
    assert during and all(s in (503, 504) for s in during)
