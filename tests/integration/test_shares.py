"""Several batchers share a multi-shard Kinesis stream (moto server): a new batcher gets its share
of the shards within about a lease period, from a batcher that gives its surplus up; a batcher
that stops leaves its shards to the others; values stay unique while the shards move."""

from __future__ import annotations

import asyncio
import time

import pytest

from batcher.worker import Batcher
from infra.adapters.postgres import PostgresStore
from infra.adapters.serverless import AwsPorts, aws_ports
from infra.counters import Counter
from infra.observe.metrics import Metrics
from infra.settings import Settings
from infra.wire import Record
from tests.aws import resources, started


async def settle(batchers: list[Batcher], shares: list[int], within: float) -> float:
    """Seconds until each batcher holds its expected number of leases; fail after `within`."""
    began = time.monotonic()
    while [b.metrics.leases_held.value for b in batchers] != shares:
        if time.monotonic() - began > within:
            held = [b.metrics.leases_held.value for b in batchers]
            raise AssertionError(f"leases held {held}, expected {shares} within {within}s")
        await asyncio.sleep(0.1)
    return time.monotonic() - began


async def take(ports: AwsPorts, name: str, tag: str, n: int) -> list[int]:
    now = time.time()
    keys = [f"{tag}-{i}" for i in range(n)]
    for key in keys:
        ports.replies.expect(key)
    await ports.stream.put([Record(k, name, 1, None, now + 60, now) for k in keys])
    got = await asyncio.gather(*(ports.replies.wait(k, 20) for k in keys))
    return [reply.first for reply in got]


@pytest.mark.slow  # 3-5 s: the fast lane's budget (docs/testing.md)
async def test_a_new_batcher_gets_its_share_and_a_leaving_one_gives_its_shards_back(
    aws_endpoint: str, settings: Settings, store: PostgresStore, name: str
) -> None:
    await store.create(Counter(name))
    ttl = 3.0
    quick = settings.but(lease_ttl_s=ttl, read_interval_ms=50.0, partition_spread=8)
    with resources(quick, shards=4) as (own, found):
        first, ports = await started(own, found, store)
        second: Batcher | None = None
        try:
            await settle([first], [4], ttl)
            values = await take(ports, name, "alone", 40)
            second, _ = await started(own, found, store)
            moved = await settle([first, second], [2, 2], 2 * ttl)
            values += await take(ports, name, "shared", 40)
            await second.stop()
            back = await settle([first], [4], 2 * ttl)
            values += await take(ports, name, "after", 40)
        finally:
            await first.stop()
            if second is not None:
                await second.stop()
    assert moved < 2 * ttl and back < 2 * ttl
    assert second.metrics.lease_takeovers.value == 2  # the two shards the first gave up
    assert first.metrics.lease_takeovers.value == 2  # and took back when the second stopped
    assert sorted(values) == list(range(1, 121))


@pytest.mark.slow  # waits out a batcher's joining: 6 s
async def test_a_joining_batcher_knows_its_share_before_it_claims(
    aws_endpoint: str, settings: Settings, store: PostgresStore, name: str
) -> None:
    """One shard, a second batcher joins: it takes nothing, and the first hands nothing over,
    even when the joiner's name sorts first (the share order is the order they joined)."""
    ttl = 3.0
    quick = settings.but(lease_ttl_s=ttl, read_interval_ms=50.0)
    with resources(quick, shards=1) as (own, found):
        metrics = Metrics()
        ports = aws_ports(own, metrics, found)
        first = Batcher(ports.stream, ports.replies, store, own, metrics, owner="zz-first")
        await first.start()
        second: Batcher | None = None
        try:
            await settle([first], [1], ttl)
            more = aws_ports(own, Metrics(), found)
            second = Batcher(more.stream, more.replies, store, own, Metrics(), owner="aa-joiner")
            await second.start()
            assert second.shares.share == 0, "known at start, before any claim"
            await asyncio.sleep(2 * ttl)  # several balances of each
            assert [first.metrics.leases_held.value, second.metrics.leases_held.value] == [1, 0]
            assert (
                second.metrics.lease_takeovers.value == 0
                and first.metrics.lease_takeovers.value == 0
            )
        finally:
            await first.stop()
            if second is not None:
                await second.stop()
