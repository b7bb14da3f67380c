from __future__ import annotations

import asyncio

import pytest

from infra.adapters.memory import MemoryReplies, MemoryStream
from infra.errors import ReplyTimeout, StreamFull
from infra.observe.metrics import Metrics
from infra.wire import Record, Reply, ReplyError


async def test_stream_delivers_in_order_with_increasing_sequences() -> None:
    stream = MemoryStream()
    await stream.put([Record("a", "c"), Record("b", "c")])
    (shard,) = await stream.shards()
    entries = await stream.read(shard, None, 10, 0)
    assert [e.record.key for e in entries if e.record] == ["a", "b"]
    assert [int(e.sequence) for e in entries] == [1, 2]
    assert await stream.read(shard, "2", 10, 0) == []


async def test_stream_read_waits_for_a_record() -> None:
    stream = MemoryStream()
    (shard,) = await stream.shards()
    reader = asyncio.create_task(stream.read(shard, None, 10, 5))
    await asyncio.sleep(0.01)
    await stream.put([Record("a", "c")])
    (entry,) = await reader
    assert await stream.read(shard, entry.sequence, 10, 0.01) == []


async def test_full_stream_refuses_records() -> None:
    stream = MemoryStream(capacity=2)
    await stream.put([Record("a", "c"), Record("b", "c")])
    with pytest.raises(StreamFull):
        await stream.put([Record("c", "c")])


async def test_replies_reach_their_waiter_and_time_out_otherwise() -> None:
    metrics = Metrics()
    replies = MemoryReplies(metrics)
    replies.expect("a")
    await replies.publish([Reply("a", "c", 1, 1)])
    assert (await replies.wait("a", 1)).first == 1
    replies.expect("b")
    with pytest.raises(ReplyTimeout):
        await replies.wait("b", 0.01)
    await replies.publish([Reply("b", "c", 2, 2)])  # nobody waits: abandoned, a gap
    assert metrics.replies_abandoned.value == 1


async def test_an_error_reply_nobody_waits_for_is_not_counted_abandoned() -> None:
    """numerator_replies_abandoned_total counts values nobody received (the gaps of guarantee 5):
    an error reply holds none."""
    metrics = Metrics()
    replies = MemoryReplies(metrics)
    error = Reply("a", "c", error=ReplyError.COUNTER_NOT_FOUND, detail="no counter c")
    await replies.publish([error, Reply("b", "c", 1, 2)])  # neither waited for
    assert metrics.replies_abandoned.value == 1, "only the reply with values"
