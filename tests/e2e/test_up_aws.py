"""`numerator up --aws moto`, as a user runs it: moto server, the stream and table, a batcher
process and the HTTP edge — in server mode and with every request through the Lambda handler.
With AWS_ENDPOINT_URL set (LocalStack), the same tests run against that endpoint instead."""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bench.http import HttpError, HttpPool
from infra.settings import Settings
from numerator import local as numerator_local
from tests.checks import Answer, assert_accounted, assert_guarantees
from tests.e2e.service import Service, data_dir

pytestmark = pytest.mark.slow

TARGET = os.environ.get("AWS_ENDPOINT_URL") or "moto"


async def burst(
    url: str, counter: str, requests: int, answered: list[int] | None = None
) -> tuple[list[Answer], dict[int, int]]:
    """`requests` concurrent POSTs to /next, each on a connection of its own (the bench's HTTP
    client: httpx queues 1,000 requests so slowly that it would measure itself)."""
    client = HttpPool(url, requests)
    raw = client.build("POST", f"/counters/{counter}/next")

    async def one() -> tuple[int, Answer | None]:
        sent = time.monotonic()
        try:
            status, body = await client.send(raw, 120)
        except HttpError:  # the service was killed under it
            return 0, None
        if status != 200:
            return status, None
        value = orjson.loads(body)["value"]
        if answered is not None:
            answered.append(value)
        return 200, Answer(counter, value, value, sent, time.monotonic())

    try:
        results = await asyncio.gather(*(one() for _ in range(requests)))
    finally:
        client.close()
    statuses: dict[int, int] = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    return [a for _, a in results if a is not None], statuses


@pytest.mark.parametrize(("edge", "requests"), [("server", 1000), ("lambda", 300)])
def test_up_aws_hands_out_unique_values_to_concurrent_requests(
    tmp_path: Path, edge: str, requests: int
) -> None:
    # With --edge lambda every simulated container (LAMBDA_CONTAINERS, 8) puts and polls on its
    # own, as in Lambda, and moto serves only ~100 calls/s here, shared with the batcher's reads.
    # 300 requests keep every container busy for many invocations (about 11 s).
    env = {"REPLY_TIMEOUT_S": "25"} if edge == "lambda" else {}
    args = ("--aws", TARGET, "--edge", edge, "--data-dir", data_dir(tmp_path))
    with Service(*args, env=env) as service:
        created = httpx.post(service.url + "/counters", json={"name": "burst"}, timeout=30)
        assert created.status_code == 201, created.text
        began = time.monotonic()
        answers, statuses = asyncio.run(burst(service.url, "burst", requests))
        took = time.monotonic() - began
        metrics = httpx.get(service.url + "/metrics", timeout=10).text
    print(f"--edge {edge}: {requests} concurrent requests in {took:.1f}s, statuses {statuses}")
    assert statuses == {200: requests}, f"{statuses}\n{service.output}"
    assert_guarantees(answers)
    assert "AWS path" in service.output and "batcher(s)" in service.output
    if edge == "server":  # one process: its metrics show the AWS calls it made
        assert "numerator_aws_calls_total{call=" in metrics


def test_up_aws_url_uses_a_running_endpoint(tmp_path: Path, aws_endpoint: str) -> None:
    """`--aws URL`, as with LocalStack on :4566: here the test session's own endpoint."""
    with Service("--aws", aws_endpoint, "--ephemeral") as service:
        assert httpx.post(service.url + "/counters", json={"name": "u"}, timeout=30).is_success
        answers, statuses = asyncio.run(burst(service.url, "u", 100))
    assert statuses == {200: 100}
    assert_guarantees(answers)
    assert f"the endpoint at {aws_endpoint}" in service.output


def test_up_lambda_edge_with_auth_none_serves_loopback(aws_endpoint: str) -> None:
    """AUTH=none on loopback through simulated Lambda containers: each container refuses
    AUTH=none with nothing named in front, as in Lambda; `up` names its loopback front."""
    args = ("--aws", aws_endpoint, "--edge", "lambda", "--ephemeral")
    with Service(*args, env={"AUTH": "none"}) as service:
        made = httpx.post(service.url + "/counters", json={"name": "open"}, timeout=30)
        assert made.status_code == 201, made.text
        answers, statuses = asyncio.run(burst(service.url, "open", 20))
    assert statuses == {200: 20}
    assert_guarantees(answers)
    assert "AUTH=none (loopback only (127.0.0.1))" in service.output


def test_serve_aws_url_is_the_edge_alone_beside_a_batcher(
    aws: tuple[Settings, Any], database_url: str
) -> None:
    """`numerator serve --aws URL`: the AWS path's edge (front frames) on its own, with a
    `numerator batcher` started apart, as they run in production."""
    settings, _ = aws
    env = {"STREAM_NAME": settings.aws.stream_name, "REPLY_TABLE": settings.aws.reply_table}
    with numerator_local.batchers(1, {**env, "MODE": "aws", "DATABASE_URL": database_url}):
        args = ("--aws", os.environ["AWS_ENDPOINT_URL"], "--database-url", database_url)
        with Service(*args, env=env, command="serve") as service:
            made = httpx.post(service.url + "/counters", json={"name": "s"}, timeout=30)
            assert made.is_success, made.text
            answers, statuses = asyncio.run(burst(service.url, "s", 100))
            metrics = httpx.get(service.url + "/metrics", timeout=5).text
    assert statuses == {200: 100}
    assert_guarantees(answers)
    assert 'role="edge"' in metrics
    assert "MODE=aws, FRONT_FRAME_MS=20," in service.output, "the banner names the front frame"
    put = next(
        line for line in metrics.splitlines() if line.startswith("numerator_records_put_total")
    )
    assert float(put.split()[-1]) < 100, "front frames: fewer records than requests"


async def waves(
    url: str, counter: str, total: int, size: int, answered: list[int]
) -> tuple[list[Answer], dict[int, int]]:
    """`total` requests as bursts of `size`, one after another, until one is cut: a load that is
    still running when the test kills the service (one burst of all of them is answered by a
    single front frame, all at once, before the kill can come)."""
    answers: list[Answer] = []
    statuses: dict[int, int] = {}
    for _ in range(total // size):
        got, counts = await burst(url, counter, size, answered)
        answers += got
        for status, n in counts.items():
            statuses[status] = statuses.get(status, 0) + n
        if counts.get(0):
            break  # the service died under this burst
    return answers, statuses


def test_up_aws_after_kill_9_of_everything_starts_again_without_a_value_twice(
    tmp_path: Path,
) -> None:
    """SIGKILL of `up`, its batcher, moto and Postgres mid-load, then `up` again on the same data
    directory: a new moto makes a new stream, which is read afresh, and no value comes twice."""
    folder = data_dir(tmp_path)
    service = Service("--aws", TARGET, "--data-dir", folder)
    try:
        assert httpx.post(service.url + "/counters", json={"name": "k"}, timeout=30).is_success
        answered: list[int] = []
        with ThreadPoolExecutor(1) as load:
            running = load.submit(asyncio.run, waves(service.url, "k", 3000, 100, answered))
            deadline = time.monotonic() + 60
            while len(answered) < 200 and time.monotonic() < deadline:
                time.sleep(0.01)
            service.crash(tmp_path / "data")
            first, killed = running.result()
    finally:
        service.stop()
    assert first and killed.get(0), killed  # it died mid-load: some answered, some cut
    with Service("--aws", TARGET, "--data-dir", folder) as again:
        second, statuses = asyncio.run(burst(again.url, "k", 200))
        values = [a.first for a in first + second]
        assert_accounted(again.url, "k", set(values))
    assert statuses == {200: 200}
    assert len(values) == len(set(values)) == len(first) + 200
    assert min(a.first for a in second) > max(a.first for a in first)
