"""Front frames (functions/front.py) in memory: a request whose values come just as its client
leaves has them voided, abandoned — never handed to a client that is gone."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from datetime import date
from types import SimpleNamespace
from typing import Any

import pytest

from functions.edge import Edge
from functions.fastpath import put_and_wait
from functions.front import Front
from functions.watch import ClientLeft
from infra.adapters.memory import MemoryReplies, MemoryStream
from infra.errors import ReplyTimeout
from infra.observe.metrics import Metrics
from infra.settings import Settings
from infra.wire import Cancel, Record, Reply, reply_key


def edge_on(stream: MemoryStream, replies: MemoryReplies, metrics: Metrics) -> Edge:
    """An edge on these, for put_and_wait: it asks nothing of its store here."""
    store: Any = SimpleNamespace(ping=None)
    return Edge(stream, replies, store, Settings.from_env({"AUTH": "none"}), metrics)


def one_value(counter: str) -> Record:
    """A record for one value of `counter`, without a key, due in 5 s."""
    return Record(reply_key(), counter, 1, None, time.time() + 5, time.time(), "me")


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


async def test_an_answer_whose_client_is_known_gone_is_abandoned_not_returned() -> None:
    """granian has read the client's leaving (its receive() future is done) but the watch's
    callback has not run yet when the answer comes (`left` says so): the answer is not
    returned (ClientLeft) and its values are abandoned. Before, it was returned and sent to a
    connection granian had closed: neither received nor void (the matrix's cuts cell)."""
    stream, replies, metrics = MemoryStream(), MemoryReplies(), Metrics()
    abandoned: list[tuple[Any, ...]] = []

    async def abandon(*void: Any) -> None:
        abandoned.append(void)

    front = Front(stream, replies, metrics, 0.001, lambda t: t, abandon=abandon)
    task = asyncio.create_task(front.take("inv", 1, 5.0, "me", left=lambda: True))
    [entry] = await stream.read(stream.shard, None, 10, 5.0)
    assert isinstance(entry.record, Record)
    await replies.publish([Reply(entry.record.key, "inv", 7, 7, "{value}", date(2026, 12, 2))])
    with pytest.raises(ClientLeft):
        await task
    await asyncio.sleep(0.01)
    assert abandoned == [("inv", 7, 7, date(2026, 12, 2), "me")]


async def test_a_record_whose_client_is_known_gone_as_its_reply_comes_is_cancelled() -> None:
    """The same for a request with a record of its own (an Idempotency-Key): its record is
    cancelled on the stream (the batcher voids its values while it holds its key)."""
    stream, replies, metrics = MemoryStream(), MemoryReplies(), Metrics()
    edge = edge_on(stream, replies, metrics)
    record = Record(reply_key(), "inv", 1, "key-1", time.time() + 5, time.time(), "me")
    task = asyncio.create_task(put_and_wait(edge, record, 5.0, left=lambda: True))
    [entry] = await stream.read(stream.shard, None, 10, 5.0)
    await replies.publish([Reply(record.key, "inv", 7, 7, "{value}", date(2026, 12, 2))])
    with pytest.raises(ClientLeft):
        await task
    [cancel] = await stream.read(stream.shard, entry.sequence, 10, 5.0)
    assert isinstance(cancel.record, Cancel)
    assert (cancel.record.key, cancel.record.idempotency_key) == (record.key, "key-1")


class SlowStream(MemoryStream):
    """A durable stream whose puts return only when `through` is set (a stream that hangs)."""

    durable = True

    def __init__(self) -> None:
        super().__init__()
        self.through = asyncio.Event()

    async def put(self, records: Any, shard: str | None = None) -> None:
        await self.through.wait()
        await super().put(records, shard)


async def test_a_put_that_takes_the_whole_wait_is_a_timeout_and_its_record_is_cancelled() -> None:
    """A put to a stream that does not answer is held to the request's wait as its reply is
    (in Lambda: before the invocation ends); the record, if the put lands after all, is
    cancelled after it, so that the batcher never hands its values out to no one."""
    stream, replies, metrics = SlowStream(), MemoryReplies(), Metrics()
    edge = edge_on(stream, replies, metrics)
    record = one_value("inv")
    began = time.monotonic()
    with pytest.raises(ReplyTimeout, match=r"did not take the record within 0\.2s"):
        await asyncio.wait_for(put_and_wait(edge, record, 0.2), 5.0)  # not a hang
    assert time.monotonic() - began < 1.0
    stream.through.set()  # the put lands after all
    [entry, cancel] = await stream.read(stream.shard, None, 10, 5.0)
    assert entry.record == record
    assert isinstance(cancel.record, Cancel) and cancel.record.key == record.key


async def test_a_reply_timeout_names_the_whole_wait_not_what_the_put_left_of_it() -> None:
    """A client that waited 5 s was told "no reply within 0.199288s": the wait left after its
    record's put (an outsider's run with moto stopped). The detail names the whole wait."""
    stream, replies, metrics = MemoryStream(), MemoryReplies(), Metrics()
    edge = edge_on(stream, replies, metrics)
    record = one_value("inv")
    with pytest.raises(ReplyTimeout, match=r"^no reply within 0\.2s$"):
        await put_and_wait(edge, record, 0.2)  # no batcher: no reply comes


async def test_beats_front_frames_close_on_reads_at_most_one_frame_a_front_frame_ms() -> None:
    """FRONT_FRAME_POLICY=beats on phased beats of many shards (a read every 5 ms here): a frame
    closes at the last moment before a read, but never sooner than FRONT_FRAME_MS (20 ms) after
    the last frame closed, so a busy edge puts at most one frame a 20 ms whatever the shards
    (each frame is a put, a reply item and a read of it), and an idle one's lone request goes
    at the next read, not 20 ms on."""
    stream, replies, metrics = MemoryStream(), MemoryReplies(), Metrics()
    gap = 0.005

    def before_beat(takes: float, after: float) -> float:
        returns = time.time() + max(0.0, after) + takes
        return math.ceil(returns / gap) * gap - takes - time.time()

    front = Front(stream, replies, metrics, 0.02, lambda t: t, before_beat=before_beat)
    closes: list[float] = []
    frames = 0

    async def answer() -> None:
        nonlocal frames
        after = None
        while True:
            for entry in await stream.read(stream.shard, after, 100, 0.5):
                after = entry.sequence
                assert isinstance(entry.record, Record)
                closes.append(time.monotonic())
                frames += 1
                await replies.publish(
                    [Reply(entry.record.key, "inv", 1, entry.record.count, "{value}", date.today())]
                )

    answering = asyncio.create_task(answer())
    began = time.monotonic()
    takes = []
    while time.monotonic() < began + 0.3:  # a request every millisecond for 0.3 s
        takes.append(asyncio.create_task(front.take("inv", 1, 5.0)))
        await asyncio.sleep(0.001)
    await asyncio.gather(*takes)
    busy = frames
    await asyncio.sleep(0.05)
    lone = time.monotonic()
    await front.take("inv", 1, 5.0)
    answering.cancel()
    assert busy <= 0.3 / 0.02 + 2, busy  # one a 20 ms at most, not one a 5 ms read (60)
    # seen by the reader, a few ms late each: no two 5 ms reads apart
    assert min(b - a for a, b in itertools.pairwise(closes[:busy])) >= 0.012, closes
    assert closes[-1] - lone < 0.02, closes[-1] - lone  # idle: at the next read


async def test_beats_front_frames_give_a_request_that_just_missed_its_beat_a_second_chance() -> (
    None
):
    """FRONT_FRAME_POLICY=beats on shared beats (a read every 100 ms here, puts taking 5 or 20 ms):
    the beat's frame closes leaving room for a slow put (the learned mean and twice its
    deviation); the requests that come after it would wait a whole beat more, so one more frame
    closes for that same read, leaving room for a put of the mean time — at most two frames a
    read, the second after the first and before the read."""
    interval = 0.1
    closed: list[float] = []
    times = itertools.cycle((0.005, 0.02))

    class Slow(MemoryStream):
        async def put(self, records: Any, shard: str | None = None) -> None:
            closed.append(time.time())
            await asyncio.sleep(next(times))
            await super().put(records)

    stream, replies, metrics = Slow(), MemoryReplies(), Metrics()

    def before_beat(takes: float, after: float) -> float:
        returns = time.time() + max(0.0, after) + takes
        return math.ceil(returns / interval) * interval - takes - time.time()

    front = Front(stream, replies, metrics, 0.02, lambda t: t, before_beat=before_beat)

    async def answer() -> None:
        after = None
        while True:
            for entry in await stream.read(stream.shard, after, 100, 0.5):
                after = entry.sequence
                assert isinstance(entry.record, Record)
                await replies.publish(
                    [Reply(entry.record.key, "inv", 1, entry.record.count, "{value}", date.today())]
                )

    answering = asyncio.create_task(answer())
    takes = []
    began = time.monotonic()
    while time.monotonic() < began + 0.75:  # a request every 2 ms for seven beats and more
        takes.append(asyncio.create_task(front.take("inv", 1, 5.0)))
        await asyncio.sleep(0.002)
    await asyncio.gather(*takes)
    answering.cancel()
    by_read: dict[int, list[float]] = {}
    for at in closed:
        by_read.setdefault(math.ceil(at / interval), []).append(at)
    assert max(len(c) for c in by_read.values()) <= 2, by_read  # never a third frame a read
    twice = [c for c in by_read.values() if len(c) == 2]
    assert len(twice) >= 3, by_read  # the second chance, beat after beat
    for first, second in twice:
        assert 0.005 < second - first < 0.03, (first, second)  # after the beat's own frame
