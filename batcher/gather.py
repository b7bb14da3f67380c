"""Replies gathered across a batcher's shards: the frames that commit together publish together.

A long-running edge reads its replies a frame at a time: one reply item per edge per write
(infra/adapters/dynamodb.py), and DynamoDB bills a write by the item, one unit a KB. A batcher
reads all its shards on the same beats, so its frames commit within milliseconds of each other;
published one by one, each edge got an item per shard per beat, most of them holding two or three
replies — at 40,000 requests a second nine tenths of the AWS bill (issue 33). Gathered, each
edge gets one item per batcher per beat.

A frame's publish waits while another shard of this batcher is being read (a GetRecords in
flight: `reading`) or has a frame applying (from its read's return to its publish), for at
most REPLY_GATHER_MS from the first that waited; then all their replies go in one publish, and
each frame hears how it went. It never waits past when the edges first read the replies of the
beat (BACK_FRAME_MS + REPLY_LAG_MS after it, less WRITE_S for the write): a frame in time is not
made late by a sibling that is not, or every reply of the beat would be read a beat later. A
batcher with one shard waits for nothing. A publish that fails fails each of its frames, and each
tries again alone (the applier's retries are not gathered).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager

from infra.ports import Reads
from infra.wire import Reply

Publish = Callable[[Sequence[Reply]], Awaitable[None]]
WRITE_S = 0.01
"""A reply write's own time (a BatchWriteItem, about 5 ms on AWS): a gather publishes at least
this long before the edges first read the replies of the beat."""


class Gather:
    def __init__(
        self,
        publish: Publish,
        seconds: float,
        reads: Reads | None = None,
        interval: float = 0.0,
        lag: float = 0.0,
    ) -> None:
        """`reads`: the stream, whose reads in flight a publish waits for; `interval` and
        `lag`: its read beats, and how long after one the edges first read its replies
        (beats.reply_lag); no interval, no such limit."""
        self._publish, self.seconds, self.reads = publish, seconds, reads
        self.interval, self.lag = interval, lag
        if reads is not None:
            reads.read_ended = self.check
        self._applying: set[object] = set()  # frames begun and not yet published or given up
        self._ready: list[tuple[Sequence[Reply], asyncio.Future[None]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @contextmanager
    def applying(self) -> Iterator[object]:
        """From a read that returned records until their frame is published: its token, for
        `publish`; a frame that leaves without publishing (its lease lost, its records given
        up) holds no one up."""
        token = object()
        self._applying.add(token)
        try:
            yield token
        finally:
            if token in self._applying:
                self._applying.discard(token)
                self.check()

    async def publish(self, token: object, replies: Sequence[Reply]) -> None:
        """Publish `replies` with those of the frames applying beside this one."""
        self._applying.discard(token)
        done = asyncio.get_running_loop().create_future()
        self._ready.append((replies, done))
        self.check()
        await asyncio.shield(done)  # a frame cancelled as it waits leaves the others' write be

    def check(self) -> None:
        """Publish what waits if no shard is being read or applied now."""
        if not self._ready:
            return
        reading = self.reads.reading if self.reads is not None else 0
        if (not self._applying and not reading) or self.seconds <= 0:
            self._flush()
        elif self._timer is None:
            wait = min(self.seconds, self._left())
            if wait <= 0:
                self._flush()
            else:
                self._timer = asyncio.get_running_loop().call_later(wait, self._flush)

    def _left(self) -> float:
        """Seconds until the edges read the replies of this beat, less WRITE_S."""
        if self.interval <= 0:
            return math.inf
        now = time.time()
        beat = math.floor(now / self.interval) * self.interval  # the one these frames read on
        return beat + self.lag - WRITE_S - now

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        ready, self._ready = self._ready, []
        if ready:
            task = asyncio.get_running_loop().create_task(self._write(ready))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write(self, ready: list[tuple[Sequence[Reply], asyncio.Future[None]]]) -> None:
        try:
            await self._publish([reply for replies, _ in ready for reply in replies])
        except asyncio.CancelledError:  # the batcher stops
            for _, done in ready:
                done.cancel()
            raise
        except Exception as exc:
            for _, done in ready:
                if not done.done():
                    done.set_exception(exc)
                    done.exception()  # retrieved: a frame that was cancelled reads it no more
        else:
            for _, done in ready:
                if not done.done():
                    done.set_result(None)
