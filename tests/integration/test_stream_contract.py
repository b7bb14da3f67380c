"""The Stream contract, run unchanged against every adapter: in memory, the durable list stand-in,
and Kinesis — on moto server (or the endpoint AWS_ENDPOINT_URL names), and on LocalStack."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from infra.adapters.aws import AwsCaller
from infra.adapters.kinesis import KinesisStream
from infra.adapters.memory import MemoryStream
from infra.observe.metrics import Metrics
from infra.ports import Stream
from infra.settings import Settings
from infra.wire import Record
from tests.streams import ListStream, read_all


@dataclass
class Made:
    stream: Stream
    reopen: Callable[[], Stream]
    """A new adapter over the same stream: a restarted batcher's view of it."""
    poison: Callable[[bytes], Awaitable[None]] | None
    """Put raw bytes straight on the stream, as a foreign or broken writer would (durable
    streams only: the memory stream holds records, not bytes)."""


def kinesis(
    settings: Settings, found: Any, metrics: Metrics | None = None, threads: int = 4
) -> KinesisStream:
    metrics = metrics or Metrics()
    calls = AwsCaller(threads, metrics)
    return KinesisStream(
        found.kinesis, calls, settings.aws.stream_name, metrics, read_interval=0.02
    )


def make(kind: str, request: pytest.FixtureRequest) -> Made:
    if kind == "memory":
        memory = MemoryStream()
        return Made(memory, lambda: memory, None)
    if kind == "list":
        listed = ListStream()

        async def append(raw: bytes) -> None:
            listed.append(raw)

        return Made(listed, lambda: listed, append)
    settings, found = request.getfixturevalue(
        "localstack_kinesis" if kind == "localstack" else "aws"
    )

    async def poison(raw: bytes) -> None:
        await asyncio.to_thread(
            found.kinesis.put_record,
            StreamName=settings.aws.stream_name,
            Data=raw,
            PartitionKey="p",
        )

    # 16 threads: as many puts at once as the busiest edge makes (AWS_THREADS)
    return Made(kinesis(settings, found, threads=16), lambda: kinesis(settings, found), poison)


# LocalStack (its own venv, about two minutes to fill on a bare machine) is slow, not the others.
LOCALSTACK = pytest.param("localstack", marks=pytest.mark.slow)


@pytest.fixture(params=["memory", "list", "kinesis", LOCALSTACK])
def made(request: pytest.FixtureRequest) -> Made:
    return make(request.param, request)


@pytest.fixture(params=["list", "kinesis", LOCALSTACK])
def durable(request: pytest.FixtureRequest) -> Made:
    """The adapters whose `durable` is True, for what only they promise."""
    return make(request.param, request)


async def test_records_come_back_in_order_with_increasing_sequences(made: Made) -> None:
    records = [Record(f"k{i}", "inv", i % 3 + 1, None, 1e10, 1.0) for i in range(12)]
    await made.stream.put(records[:5])
    await asyncio.gather(*(made.stream.put([r]) for r in records[5:]))
    entries = await read_all(made.stream, expect=12)
    assert sorted(e.record.key for e in entries) == sorted(r.key for r in records)
    assert [e.record.key for e in entries[:5]] == [r.key for r in records[:5]]
    sequences = [int(e.sequence) for e in entries]
    assert sequences == sorted(sequences) and len(set(sequences)) == 12
    assert entries[0].record == records[0]  # every field survives the trip


async def test_every_acknowledged_put_is_kept_however_many_come_at_once(made: Made) -> None:
    """As an edge's threads put them (moto's own server can lose one of two concurrent puts:
    numerator.motoserver lets one request at a time into moto)."""
    records = [Record(f"k{i}", "inv") for i in range(300)]
    await asyncio.gather(*(made.stream.put([r]) for r in records))
    entries = await read_all(made.stream, expect=300)
    assert sorted(e.record.key for e in entries) == sorted(r.key for r in records)
    assert len({e.sequence for e in entries}) == 300


async def test_a_read_after_a_sequence_returns_what_follows_and_can_be_repeated(
    made: Made,
) -> None:
    await made.stream.put([Record(f"k{i}", "inv") for i in range(6)])
    entries = await read_all(made.stream, expect=6)
    (shard,) = await made.stream.shards()
    middle = entries[2].sequence
    following = await read_all(made.stream, after=middle, expect=3)
    assert [e.record.key for e in following] == ["k3", "k4", "k5"]
    again = await read_all(made.stream, after=middle, expect=3)
    assert [e.sequence for e in again] == [e.sequence for e in following]
    assert await made.stream.read(shard, entries[-1].sequence, 10, 0) == []


async def test_a_read_waits_for_a_record_and_then_gives_up(made: Made) -> None:
    (shard,) = await made.stream.shards()
    began = time.monotonic()
    assert await made.stream.read(shard, None, 10, 0.3) == []
    assert 0.0 <= time.monotonic() - began < 5
    lag = made.stream.lag(shard)
    assert lag is None or lag >= 0


async def test_shards_name_the_shard_of_every_entry(made: Made) -> None:
    await made.stream.put([Record("k", "inv")])
    shards = await made.stream.shards()
    (entry,) = await read_all(made.stream)
    assert entry.shard in shards and shards[entry.shard] == ()


async def test_a_durable_stream_replays_from_a_checkpoint_for_a_new_reader(
    durable: Made,
) -> None:
    await durable.stream.put([Record(f"k{i}", "inv") for i in range(5)])
    first = await read_all(durable.stream, expect=5)
    fresh = durable.reopen()
    assert [e.record.key for e in await read_all(fresh, expect=5)] == [f"k{i}" for i in range(5)]
    rest = await read_all(fresh, after=first[1].sequence, expect=3)
    assert [e.record.key for e in rest] == ["k2", "k3", "k4"]


async def test_bytes_that_are_no_record_come_back_as_poison_entries(durable: Made) -> None:
    assert durable.poison is not None
    await durable.poison(b"{not json")
    await durable.poison(b'{"v": 9, "k": "r1", "c": "inv", "n": 1, "d": 1}')
    await durable.poison(b'{"k": "r2", "c": "inv", "n": 0, "d": 1}')
    await durable.stream.put([Record("fine", "inv")])
    entries = await read_all(durable.stream, expect=4)
    assert [e.record is None for e in entries] == [True, True, True, False]
    assert [e.key for e in entries] == [None, None, "r2", "fine"]
    assert "not JSON" in entries[0].problem and "wire version" in entries[1].problem
    assert entries[0].raw == b"{not json"


async def test_only_the_memory_stream_says_it_is_not_durable(made: Made) -> None:
    assert made.stream.durable is (not isinstance(made.stream, MemoryStream))
