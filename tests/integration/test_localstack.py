"""The serverless path end to end with Kinesis on LocalStack (host mode) and replies on moto: the
edge puts, the batcher reads LocalStack's shard and commits to Postgres, every value once. Kept
small: LocalStack answers 30-45 calls a second here."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from infra.settings import Settings
from numerator.stack import BatcherStack, EdgeStack
from tests.asgi import asgi_client

pytestmark = pytest.mark.slow


async def test_values_go_through_kinesis_on_localstack(
    localstack_kinesis: tuple[Settings, Any], localstack_endpoint: str, name: str
) -> None:
    settings, found = localstack_kinesis
    assert found.kinesis.meta.endpoint_url == localstack_endpoint
    assert found.dynamodb.meta.endpoint_url != localstack_endpoint
    own = settings.but(reply_timeout_s=20.0)
    async with BatcherStack(own), EdgeStack(own) as edge, asgi_client(edge.app()) as client:
        assert (await client.post("/counters", json={"name": name})).status_code == 201
        got = await asyncio.gather(*(client.post(f"/counters/{name}/next") for _ in range(30)))
        keyed = await client.post(
            f"/counters/{name}/next", params={"count": 2}, headers={"Idempotency-Key": "a"}
        )
        again = await client.post(
            f"/counters/{name}/next", params={"count": 2}, headers={"Idempotency-Key": "a"}
        )
    assert [r.status_code for r in got] == [200] * 30
    assert sorted(r.json()["value"] for r in got) == list(range(1, 31))
    assert keyed.json() == again.json() and keyed.json()["first"] == 31
