"""/healthz on the AWS path, against moto server and Postgres: red while no batcher is alive,
green once one is, red again soon after the last one stops; red naming a missing stream."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from infra.observe.health import BATCHER_ALIVE_S, FRESH_S
from infra.settings import Settings
from numerator.stack import BatcherStack, EdgeStack
from tests.asgi import asgi_client
from tests.checks import until


async def health(client: httpx.AsyncClient) -> tuple[int, dict[str, str]]:
    answer = await client.get("/healthz")
    return answer.status_code, answer.json()


@pytest.mark.slow  # 3-5 s: the fast lane's budget (docs/testing.md)
async def test_the_edge_is_healthy_only_while_a_batcher_is_alive(
    aws: tuple[Settings, Any],
) -> None:
    settings, _ = aws
    async with EdgeStack(settings) as edge, asgi_client(edge.app()) as client:
        status, report = await health(client)
        assert status == 503 and report["status"] == "degraded", report
        assert report["batchers"].startswith("down: no batcher"), report
        assert report["store"] == report["stream"] == report["replies"] == "ok", report
        async with BatcherStack(settings):

            async def green() -> bool:
                return (await health(client))[0] == 200

            await until(green, within=FRESH_S + 3)

        # A batcher that stops says so (the batchers table): red at the next report, not
        # after BATCHER_ALIVE_S.
        async def red() -> bool:
            return (await health(client))[0] == 503

        took = await until(red, within=FRESH_S + 2)
    assert took < BATCHER_ALIVE_S


async def test_a_missing_stream_is_named(aws: tuple[Settings, Any]) -> None:
    settings, found = aws
    async with (
        BatcherStack(settings),
        EdgeStack(settings) as edge,
        asgi_client(edge.app()) as client,
    ):
        await until(lambda: _ok(client), within=FRESH_S + 3)
        found.kinesis.delete_stream(StreamName=settings.aws.stream_name)

        async def named() -> bool:
            status, report = await health(client)
            return status == 503 and report["stream"].startswith("down")

        await until(named, within=FRESH_S + 3)
        _, report = await health(client)
    found.kinesis.create_stream(StreamName=settings.aws.stream_name, ShardCount=1)  # for teardown
    assert report["replies"] == "ok", report


async def _ok(client: httpx.AsyncClient) -> bool:
    return (await health(client))[0] == 200
