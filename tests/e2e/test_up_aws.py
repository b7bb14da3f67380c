"""`numerator up --aws moto`, as a user runs it: moto server, the stream and table, a batcher
process and the HTTP edge — in server mode and with every request through the Lambda handler.
With AWS_ENDPOINT_URL set (LocalStack), the same tests run against that endpoint instead."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx
import orjson
import pytest

from bench.http import Client
from tests.checks import Answer, assert_unique_without_holes
from tests.e2e.service import Service, data_dir

pytestmark = pytest.mark.slow

TARGET = os.environ.get("AWS_ENDPOINT_URL") or "moto"


async def burst(url: str, counter: str, requests: int) -> tuple[list[Answer], dict[int, int]]:
    """`requests` concurrent POSTs to /next, each on a connection of its own (the bench's HTTP
    client: httpx queues 1,000 requests so slowly that it would measure itself)."""
    client = Client(url, requests)
    raw = client.build("POST", f"/counters/{counter}/next")

    async def one() -> tuple[int, Answer | None]:
        sent = time.monotonic()
        status, body = await client.send(raw, 120)
        if status != 200:
            return status, None
        value = orjson.loads(body)["value"]
        return 200, Answer(counter, value, value, sent, time.monotonic())

    try:
        results = await asyncio.gather(*(one() for _ in range(requests)))
    finally:
        client.close()
    statuses: dict[int, int] = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    return [a for _, a in results if a is not None], statuses


@pytest.mark.parametrize("edge", ["server", "lambda"])
def test_up_aws_hands_out_unique_values_to_1000_concurrent_requests(
    tmp_path: Path, edge: str
) -> None:
    with Service("--aws", TARGET, "--edge", edge, "--data-dir", data_dir(tmp_path)) as service:
        created = httpx.post(service.url + "/counters", json={"name": "burst"}, timeout=30)
        assert created.status_code == 201, created.text
        began = time.monotonic()
        answers, statuses = asyncio.run(burst(service.url, "burst", 1000))
        took = time.monotonic() - began
        metrics = httpx.get(service.url + "/metrics", timeout=10).text
    print(f"--edge {edge}: 1000 concurrent requests in {took:.1f}s, statuses {statuses}")
    assert statuses == {200: 1000}, statuses
    assert_unique_without_holes(answers)
    assert "AWS path" in service.output and "batcher(s)" in service.output
    if edge == "server":  # one process: its metrics show the AWS calls it made
        assert "numerator_aws_calls_total{call=" in metrics
