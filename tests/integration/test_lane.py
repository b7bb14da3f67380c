"""The lane through an embedded stack: concurrent plain /next of a counter share records and
each gets its own value; FRONT_FRAME_MS=0 puts a record a request; a request the lane does not
take (a count, an Idempotency-Key) is served in full beside it."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from starlette.types import Message

from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client, next_scope


@pytest.mark.parametrize("front_frame_ms", [20.0, 0.0])
async def test_concurrent_plain_requests_share_records_and_each_has_its_value(
    settings: Settings, name: str, front_frame_ms: float
) -> None:
    stacked = EmbeddedStack(settings.but(front_frame_ms=front_frame_ms))
    async with stacked as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name, "template": "N-{value:03d}"})
        answers = await asyncio.gather(
            *(client.post(f"/counters/{name}/next") for _ in range(30)),
            client.post(f"/counters/{name}/next", params={"count": 2}),
            client.post(f"/counters/{name}/next", headers={"Idempotency-Key": "k-1"}),
        )
        report = (await client.get(f"/counters/{name}/report")).json()
    assert [a.status_code for a in answers] == [200] * 32
    plain = [a.json() for a in answers[:30]]
    assert all(p["formatted"] == f"N-{p['value']:03d}" for p in plain)
    values = [p["value"] for p in plain]
    values += [v["value"] for v in answers[30].json()["values"]] + [answers[31].json()["value"]]
    assert sorted(values) == list(range(1, 34))
    assert report["issued"] == 33 and report["unexplained_gaps"] == 0
    put = stack.metrics.records_put.value
    if front_frame_ms:
        assert put < 32, "plain requests of one turn share a record"
    else:
        assert put == 32, "a record a request"


async def test_an_http2_body_on_next_is_refused_though_no_header_says_its_length(
    settings: Settings, name: str
) -> None:
    """HTTP/2 frames a body without a Content-Length (granian serves h2c): the lane leaves such
    a request to the full path, which reads its first message — 422, nothing taken; without a
    body, its value."""
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name})
        app = stack.app()

        async def post(body: bytes) -> list[Message]:
            sent: list[Message] = []

            async def receive() -> Message:
                return {"type": "http.request", "body": body, "more_body": False}

            async def send(message: Message) -> None:
                sent.append(message)

            scope = next_scope(f"/counters/{name}/next", http_version="2")
            await app(scope, receive, send)
            return sent

        refused = await post(b'{"count": 5}')
        assert refused[0]["status"] == 422
        assert b'"field":"body"' in refused[1]["body"]
        taken = await post(b"")
        assert taken[0]["status"] == 200
        assert orjson.loads(taken[1]["body"])["value"] == 1, "nothing was taken before"
