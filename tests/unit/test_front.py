"""Front frames (functions/front.py) in memory: a request whose values come just as its client
leaves has them voided, abandoned — never handed to a client that is gone."""

from __future__ import annotations

import asyncio
from datetime import date
from typing import Any

import pytest

from functions.front import Front
from infra.adapters.memory import MemoryReplies, MemoryStream
from infra.observe.metrics import Metrics
from infra.wire import Record, Reply


async def test_an_answer_that_comes_as_its_client_leaves_is_abandoned() -> None:
    """The cancel of a request (its client gone, seen by the watch) lands in the same turn of
    the loop as its answer: the request must end cancelled and its values be abandoned. With
    asyncio.wait_for the answer won and went to no one (issue 28, finding 4)."""
    stream, replies, metrics = MemoryStream(), MemoryReplies(), Metrics()
    abandoned: list[tuple[Any, ...]] = []

    async def abandon(*void: Any) -> None:
        abandoned.append(void)

    front = Front(stream, replies, metrics, 0.001, lambda t: t, abandon=abandon)
    task = asyncio.create_task(front.take("inv", 2, 5.0, "me"))
    [entry] = await stream.read(stream.shard, None, 10, 5.0)  # the frame goes out
    assert isinstance(entry.record, Record)
    reply = Reply(entry.record.key, "inv", 41, 42, "{value}", date(2026, 12, 2))
    await replies.publish([reply])  # the answer is in: the request's task is due to resume
    task.cancel()  # and its client's disconnect is seen before it does
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.01)
    assert abandoned == [("inv", 41, 42, date(2026, 12, 2), "me")]
