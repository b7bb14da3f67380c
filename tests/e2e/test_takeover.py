"""Batchers die; values stay unique. `numerator batcher` processes share a 4-shard stream on moto
server under steady load from a server edge. One that joins under load is SIGKILLed between a
frame's commit and its publish, another at an arbitrary moment, and a fresh one starts: the
survivors take the shards over after LEASE_TTL_S. At the end every request got a value or a clean
503/504, no value went out twice, every committed allocation is in the reply table, and the
requests of the last seconds were answered as fast as before the kills."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from infra.settings import Settings
from numerator.stack import EdgeStack
from tests.asgi import asgi_client
from tests.aws import resources
from tests.checks import Answer as Checked
from tests.checks import assert_ordered
from tests.e2e.service import BatcherProcess

pytestmark = pytest.mark.slow

TTL = 3.0
COUNTERS = 8  # records partitioned by counter: enough of them to reach every shard


@dataclass
class Answer:
    began: float
    took: float
    status: int
    counter: str
    values: list[int]


async def load(client: httpx.AsyncClient, stop: asyncio.Event, worker: int) -> list[Answer]:
    answers = []
    i = 0
    while not stop.is_set():
        counter = f"c{(worker + i) % COUNTERS}"
        i += 1
        began = time.monotonic()
        response = await client.post(f"/counters/{counter}/next")
        body = response.json()
        values = [body["value"]] if response.status_code == 200 else []
        took = time.monotonic() - began
        answers.append(Answer(began, took, response.status_code, counter, values))
    return answers


def published(found: Any, table: str) -> set[tuple[str, int]]:
    """Every value in the reply table: what the batchers published."""
    values: set[tuple[str, int]] = set()
    pages = found.dynamodb.get_paginator("scan").paginate(TableName=table)
    for page in pages:
        for item in page["Items"]:  # a reply, or a frame's to one edge, a line each
            for line in item["r"]["S"].splitlines():
                reply = orjson.loads(line)
                if "f" in reply:
                    values.update((reply["c"], v) for v in range(reply["f"], reply["l"] + 1))
    return values


def committed(database_url: str, stream: str) -> tuple[set[tuple[str, int]], int]:
    """Every value the committed frames allocated, and how many frames' replies are unpublished."""
    with psycopg.connect(database_url) as conn:
        ranges = conn.execute(
            "SELECT counter, first, last FROM allocations WHERE stream LIKE %s", (stream + "@%",)
        ).fetchall()
        waiting = conn.execute(
            "SELECT count(*) FROM frame_replies WHERE stream LIKE %s AND NOT published",
            (stream + "@%",),
        ).fetchone()
    values = {(c, v) for c, first, last in ranges for v in range(first, last + 1)}
    assert waiting is not None
    return values, int(waiting[0])


async def test_batchers_killed_mid_frame_and_before_publishing_lose_and_repeat_nothing(
    aws_endpoint: str, settings: Settings, database_url: str, tmp_path: Path
) -> None:
    quick = settings.but(
        lease_ttl_s=TTL,
        read_interval_ms=100.0,
        front_frame_ms=50.0,
        reply_timeout_s=12.0,
    )
    with resources(quick, shards=4) as (own, found):
        env = {k: v for k, v in own.to_env().items() if v}
        batchers = [BatcherProcess(env, tmp_path / f"b{i}") for i in (0, 1)]
        try:
            await asyncio.gather(*(b.ready() for b in batchers))
            async with EdgeStack(own) as edge, asgi_client(edge.app()) as client:
                for i in range(COUNTERS):
                    await client.post("/counters", json={"name": f"c{i}"})
                stop = asyncio.Event()
                began = time.monotonic()
                workers = [asyncio.create_task(load(client, stop, w)) for w in range(8)]
                await asyncio.sleep(3)  # the latency before any kill
                # A third batcher joins, takes its share of the shards, commits a frame and
                # pauses before publishing it: killed there.
                fault = {**env, "NUMERATOR_PAUSE_BEFORE_PUBLISH_S": "30"}
                batchers.append(BatcherProcess(fault, tmp_path / "b2"))
                await batchers[-1].said("pausing 30s before publishing", within=30)
                batchers[-1].kill()
                killed_at = time.monotonic()
                await asyncio.sleep(2.5)
                batchers[0].kill()  # mid-load, wherever it is
                batchers.append(BatcherProcess(env, tmp_path / "b3"))
                await batchers[-1].ready()
                await asyncio.sleep(4 * TTL)
                stop.set()
                answers = [a for w in workers for a in await w]
            survivors = [batchers[1], batchers[3]]
            republished = sum(b.metric("numerator_replies_republished_total") for b in survivors)
            takeovers = sum(b.metric("numerator_lease_takeovers_total") for b in survivors)
        finally:
            codes = [b.stop() for b in batchers]
        values, unpublished = committed(database_url, own.aws.stream_name)
        out = published(found, own.aws.reply_table)
    assert (codes[1], codes[3]) == (0, 0), "the survivors stop cleanly on SIGTERM"
    statuses = {a.status for a in answers}
    assert statuses <= {200, 503, 504}, statuses
    ok = [(a.counter, v) for a in answers for v in a.values]
    assert len(ok) > 100, len(ok)
    assert len(ok) == len(set(ok)), "a value was handed out twice"
    assert_ordered(
        [Checked(a.counter, v, v, a.began, a.began + a.took) for a in answers for v in a.values]
    )
    assert set(ok) <= values, "a client got a value no committed frame allocated"
    assert unpublished == 0, "a committed frame's replies were never published"
    assert values <= out, f"{len(values - out)} committed values missing from the reply table"
    assert republished >= 1, "the frame committed before the SIGKILL was published by its heir"
    assert takeovers >= 2
    # The lag came back down: requests begun well after the last kill took no longer than the
    # slowest of those before the first.
    before = [a.took for a in answers if a.began < began + 3]
    after = [a.took for a in answers if a.began > killed_at + 3 * TTL + 2.5]
    assert before and after
    assert max(after) <= max(max(before) * 2, 1.0), (max(before), max(after))
