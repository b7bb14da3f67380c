"""Resharding under load: a shard split while records flow, with a backlog on the parent. Kinesis
is kinesalite here (moto's split leaves the parent open; see tests/kinesalite.py), replies are on
moto. The parent is read to its end and its last frame committed before the first frame of either
child; no value twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from infra.adapters.postgres import PostgresStore
from infra.adapters.serverless import AwsPorts
from infra.counters import Counter
from infra.settings import Settings
from infra.trail import EDGE_MARKS
from infra.wire import Record, Reply
from tests.aws import resources, started
from tests.kinesalite import kinesalite

pytestmark = pytest.mark.slow  # kinesalite: a node process of its own

COUNTERS = 16  # partitioned by counter: all 16 in one child of the split has odds 2**-15


@pytest.fixture
def split_stream(aws_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with kinesalite() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", url)
        yield url


async def load(ports: AwsPorts, names: list[str], stop: asyncio.Event, worker: int) -> list[Reply]:
    got = []
    i = 0
    while not stop.is_set():
        now = time.time()
        key = f"w{worker}-{i}"
        record = Record(key, names[(worker + i) % len(names)], 1, None, now + 30, now)
        i += 1
        ports.replies.expect(key)
        await ports.stream.put([record])
        got.append(await ports.replies.wait(key, 30))
    return got


async def put(ports: AwsPorts, names: list[str], tag: str, n: int) -> list[str]:
    now = time.time()
    records = [
        Record(f"{tag}-{i}", names[i % len(names)], 1, None, now + 60, now) for i in range(n)
    ]
    for record in records:
        ports.replies.expect(record.key)
    await ports.stream.put(records)
    return [record.key for record in records]


async def test_a_split_shard_is_read_to_its_end_before_its_children(
    split_stream: str, settings: Settings, store: PostgresStore, name: str, database_url: str
) -> None:
    names = [f"{name}-{i}" for i in range(COUNTERS)]
    for counter in names:
        await store.create(Counter(counter))
    # Small frames, so that the parent's backlog takes several: a child read too early would
    # commit a frame among them.
    quick = settings.but(lease_ttl_s=3.0, read_interval_ms=20.0, frame_max_records=40)
    with resources(quick, shards=1) as (own, found):
        batcher, ports = await started(own, found, store)
        stop = asyncio.Event()
        workers = [asyncio.create_task(load(ports, names, stop, w)) for w in range(6)]
        try:
            await asyncio.sleep(1.5)
            await batcher.stop()  # the load goes on: the parent gathers a backlog
            backlog = await put(ports, names, "before", 400)
            parent = found.kinesis.list_shards(StreamName=own.aws.stream_name)["Shards"][0]
            middle = int(parent["HashKeyRange"]["EndingHashKey"]) // 2
            found.kinesis.split_shard(
                StreamName=own.aws.stream_name,
                ShardToSplit=parent["ShardId"],
                NewStartingHashKey=str(middle),
            )
            backlog += await put(ports, names, "after", 400)  # to the children
            batcher, _ = await started(own, found, store)
            await asyncio.sleep(4)
        finally:
            stop.set()
            replies = [reply for w in workers for reply in await w]
            replies += await asyncio.gather(*(ports.replies.wait(k, 30) for k in backlog))
            await batcher.stop()
        shards = found.kinesis.list_shards(StreamName=own.aws.stream_name)["Shards"]
    assert len(shards) == 3
    assert all(r.ok for r in replies), {r.error for r in replies}
    for counter in names:
        values = sorted(
            v for r in replies if r.counter == counter for v in range(r.first, r.last + 1)
        )
        assert values == list(range(1, len(values) + 1)), f"{counter}: a value twice or missing"
    with psycopg.connect(database_url) as conn:
        frames: list[tuple[Any, ...]] = conn.execute(
            "SELECT shard, min(id), max(id), count(*) FROM allocation_frames"
            " WHERE stream LIKE %s AND shard <> %s GROUP BY shard ORDER BY shard",
            (own.aws.stream_name + "@%", EDGE_MARKS),  # the ends of edges: a chain of no shard
        ).fetchall()
        ended = conn.execute(
            "SELECT shard FROM leases WHERE stream LIKE %s AND ended", (own.aws.stream_name + "@%",)
        ).fetchall()
    by_shard = {shard: (first, last, count) for shard, first, last, count in frames}
    assert ended == [(parent["ShardId"],)], "the parent is marked read to its end"
    assert len(by_shard) == 3, f"frames on every shard: {by_shard}"
    children = [s for s in by_shard if s != parent["ShardId"]]
    assert by_shard[parent["ShardId"]][1] < min(by_shard[c][0] for c in children), (
        "a child's frame committed before the parent's last"
    )
