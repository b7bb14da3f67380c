"""The batcher's gather (batcher/gather.py): frames applying together publish in one write."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence

import pytest

from batcher.gather import WRITE_S, Gather
from infra.errors import Unavailable
from infra.wire import Reply


def replies(*keys: str) -> list[Reply]:
    return [Reply(key, "inv", 1, 1) for key in keys]


class Writes:
    def __init__(self, fail: int = 0) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    async def __call__(self, out: Sequence[Reply]) -> None:
        self.calls.append([r.key for r in out])
        await asyncio.sleep(0)
        if self.fail:
            self.fail -= 1
            raise Unavailable("DynamoDB is away")


async def test_a_lone_frame_publishes_at_once() -> None:
    writes = Writes()
    gather = Gather(writes, seconds=10.0)
    with gather.applying() as token:
        await asyncio.wait_for(gather.publish(token, replies("a")), 1.0)
    assert writes.calls == [["a"]]


async def test_frames_applying_together_publish_in_one_write() -> None:
    writes = Writes()
    gather = Gather(writes, seconds=10.0)
    started = asyncio.Event()

    async def frame(key: str, commit_s: float) -> None:
        with gather.applying() as token:
            if key == "c":
                started.set()
            await asyncio.sleep(commit_s)
            await gather.publish(token, replies(key))

    await asyncio.wait_for(asyncio.gather(frame("a", 0.0), frame("b", 0.02), frame("c", 0.01)), 1.0)
    assert writes.calls == [["a", "c", "b"]], "one write, in the order they came to publish"


async def test_a_slow_frame_holds_the_others_no_longer_than_the_gather() -> None:
    writes = Writes()
    gather = Gather(writes, seconds=0.02)
    loop = asyncio.get_running_loop()
    slow = gather.applying()
    slow.__enter__()  # a frame whose commit is retried for seconds
    with gather.applying() as token:
        began = loop.time()
        await asyncio.wait_for(gather.publish(token, replies("a")), 1.0)
        waited = loop.time() - began
    assert writes.calls == [["a"]] and 0.015 <= waited < 0.5
    slow.__exit__(None, None, None)


async def test_a_frame_that_leaves_without_publishing_releases_the_others() -> None:
    writes = Writes()
    gather = Gather(writes, seconds=10.0)

    async def lost() -> None:
        with gather.applying():
            await asyncio.sleep(0.01)  # its lease was lost: it publishes nothing

    async def kept() -> None:
        with gather.applying() as token:
            await gather.publish(token, replies("a"))

    await asyncio.wait_for(asyncio.gather(lost(), kept()), 1.0)
    assert writes.calls == [["a"]]


async def test_a_failed_write_fails_every_frame_in_it() -> None:
    writes = Writes(fail=1)
    gather = Gather(writes, seconds=10.0)

    async def frame(key: str) -> None:
        with gather.applying() as token:
            await asyncio.sleep(0)
            await gather.publish(token, replies(key))

    results = await asyncio.wait_for(
        asyncio.gather(frame("a"), frame("b"), return_exceptions=True), 1.0
    )
    assert [type(r) for r in results] == [Unavailable, Unavailable]
    assert writes.calls == [["a", "b"]]


async def test_a_frame_cancelled_as_it_waits_leaves_the_write_to_the_others() -> None:
    writes = Writes()
    gather = Gather(writes, seconds=0.05)
    blocker = gather.applying()
    blocker.__enter__()

    async def frame(key: str) -> None:
        with gather.applying() as token:
            await gather.publish(token, replies(key))

    first = asyncio.create_task(frame("a"))
    second = asyncio.create_task(frame("b"))
    await asyncio.sleep(0.01)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1.0)
    assert writes.calls == [["a", "b"]], "the cancelled frame's replies still go out"
    blocker.__exit__(None, None, None)


class Reads:
    def __init__(self) -> None:
        self.reading = 0
        self.read_ended = None


async def test_a_publish_waits_for_a_read_in_flight_and_goes_when_it_ends_empty() -> None:
    writes, reads = Writes(), Reads()
    gather = Gather(writes, seconds=10.0, reads=reads)
    assert reads.read_ended == gather.check, "the stream tells the gather of each read's end"
    reads.reading = 1  # another shard's GetRecords, at the same beat
    with gather.applying() as token:
        task = asyncio.create_task(gather.publish(token, replies("a")))
        await asyncio.sleep(0.01)
        assert not task.done() and writes.calls == []
        reads.reading = 0  # it found nothing
        asyncio.get_running_loop().call_soon(gather.check)
        await asyncio.wait_for(task, 1.0)
    assert writes.calls == [["a"]]


async def test_a_read_that_brings_records_joins_the_write() -> None:
    writes, reads = Writes(), Reads()
    gather = Gather(writes, seconds=10.0, reads=reads)
    reads.reading = 1

    async def first() -> None:
        with gather.applying() as token:
            await gather.publish(token, replies("a"))

    async def second() -> None:
        await asyncio.sleep(0.01)
        reads.reading = 0  # its read returned records: its frame applies from now
        asyncio.get_running_loop().call_soon(gather.check)
        with gather.applying() as token:
            await asyncio.sleep(0.01)  # the commit
            await gather.publish(token, replies("b"))

    await asyncio.wait_for(asyncio.gather(first(), second()), 1.0)
    assert writes.calls == [["a", "b"]]


def lag_for(interval: float, left: float) -> float:
    """The lag that leaves `left` seconds before the edges read this beat's replies."""
    now = time.time()
    return now - math.floor(now / interval) * interval + WRITE_S + left


async def test_a_gather_publishes_before_the_edges_read_the_beats_replies() -> None:
    writes = Writes()
    interval = 3600.0  # one beat for the whole test
    gather = Gather(writes, 10.0, interval=interval, lag=lag_for(interval, 0.05))
    slow = gather.applying()
    slow.__enter__()  # a sibling whose frame would come too late for the edges' read
    loop = asyncio.get_running_loop()
    began = loop.time()
    with gather.applying() as token:
        await asyncio.wait_for(gather.publish(token, replies("a")), 1.0)
    assert writes.calls == [["a"]] and loop.time() - began < 0.5
    slow.__exit__(None, None, None)


async def test_a_frame_already_past_the_edges_read_waits_for_no_one() -> None:
    writes = Writes()
    interval = 3600.0
    gather = Gather(writes, 10.0, interval=interval, lag=lag_for(interval, -0.01))
    slow = gather.applying()
    slow.__enter__()
    with gather.applying() as token:
        await asyncio.wait_for(gather.publish(token, replies("a")), 0.1)  # not the 10 s
    assert writes.calls == [["a"]]
    slow.__exit__(None, None, None)
