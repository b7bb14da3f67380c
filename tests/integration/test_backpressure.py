"""503 with Retry-After when the batcher is saturated, 504 when no reply comes in time."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from functions.app import create_app
from functions.edge import Edge
from infra.adapters.memory import MemoryReplies, MemoryStream
from infra.adapters.postgres import PostgresStore
from infra.observe.metrics import Metrics
from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client


@pytest.mark.parametrize("how", ["records", "lane"])
async def test_saturated_stream_answers_503_with_retry_after(
    settings: Settings, name: str, how: str
) -> None:
    """A stream of 5 records at most: 60 requests at once, each a record of its own (`?count=1`
    takes the full path) or through the lane over 12 counters (a record a counter a turn of
    the loop): some are refused 503, and those refused left no gap."""
    tight = settings.but(stream_capacity=5, back_frame_ms=50, retry_after_s=3)
    names = [name] if how == "records" else [f"{name}-{i}" for i in range(12)]
    params = {"count": 1} if how == "records" else None
    async with EmbeddedStack(tight) as stack, asgi_client(stack.app()) as client:
        for each in names:
            await client.post("/counters", json={"name": each})
        responses = await asyncio.gather(
            *(
                client.post(f"/counters/{names[i % len(names)]}/next", params=params)
                for i in range(60)
            )
        )
    statuses = Counter(r.status_code for r in responses)
    assert set(statuses) == {200, 503}, statuses
    refused = next(r for r in responses if r.status_code == 503)
    assert refused.headers["retry-after"] == "3"
    assert refused.json()["type"] == "urn:numerator:problem:unavailable"
    for each in names:
        values = [r.json()["value"] for r in responses if r.status_code == 200 and
                  r.json()["counter"] == each]  # fmt: skip
        assert sorted(values) == list(range(1, len(values) + 1)), "refused requests left no gaps"


async def test_no_reply_in_time_is_504(settings: Settings, database_url: str) -> None:
    """An edge whose batcher never answers (none is running) times out with 504, not a hang."""
    quick = settings.but(reply_timeout_s=0.2)
    store = PostgresStore(database_url)
    metrics = Metrics()
    edge = Edge(MemoryStream(), MemoryReplies(metrics), store, quick, metrics)
    async with asgi_client(create_app(edge)) as client:
        response = await client.post("/counters/anything/next")
    assert response.status_code == 504
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "urn:numerator:problem:reply-timeout"
    assert metrics.responses.values == {"504": 1}
