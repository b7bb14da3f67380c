"""A server edge on the AWS path with its front frames and a batcher, on a test's own stream and
table (`running`), and bursts of /next against it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx

from infra.settings import Settings
from numerator.stack import BatcherStack, EdgeStack
from tests.asgi import asgi_client

TIMEOUT = 10.0


@asynccontextmanager
async def running(
    settings: Settings, name: str, **changes: Any
) -> AsyncIterator[tuple[EdgeStack, httpx.AsyncClient, BatcherStack]]:
    """A batcher and a server edge on this test's stream and table, and a client of the edge."""
    own = settings.but(**{"reply_timeout_s": TIMEOUT, **changes})
    async with (
        BatcherStack(own) as batcher,
        EdgeStack(own) as edge,
        asgi_client(edge.app()) as client,
    ):
        assert (await client.post("/counters", json={"name": name})).status_code == 201
        yield edge, client, batcher


async def burst(client: httpx.AsyncClient, name: str, n: int, **kw: Any) -> list[httpx.Response]:
    return list(
        await asyncio.gather(*(client.post(f"/counters/{name}/next", **kw) for _ in range(n)))
    )


def values(responses: Sequence[httpx.Response]) -> list[int]:
    out: list[int] = []
    for response in responses:
        body = response.json()
        out.extend([body["value"]] if "value" in body else [v["value"] for v in body["values"]])
    return out
