"""Front frames: the first tier of batching, in a long-running edge on the AWS path.

For FRONT_FRAME_MS the edge gathers the /next requests without an Idempotency-Key, then puts ONE
record per counter whose count is the sum of theirs, awaits its one reply, and splits the range it
names among the requests in the order they arrived. A record is what the stream, the batcher and
the reply table each charge for, so this is what makes the AWS path cheap: at 200 requests/s and a
20 ms frame, one record answers four requests. A frame that cannot be put answers every one of its
requests 503 and allocates nothing; a reply that does not come in time answers them 504.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from functions.watch import ClientLeft
from infra.adapters import beats
from infra.deadlines import Deadlines
from infra.errors import AwsRefused, NumeratorError, ReplyTimeout
from infra.observe import traces
from infra.observe.metrics import Metrics
from infra.ports import Replies, Stream
from infra.wire import MAX_RECORD_COUNT, BadReply, Record, Reply, reply_key

log = logging.getLogger("numerator.front")

CLOSING_S = 0.02
"""FRONT_FRAME_POLICY=beats: the first guess of how long from a frame's close to its put's return
(then learned, `Front.closing`), and half of it its first guess of deviation."""


@dataclass(slots=True)
class Waiter:
    """One request in a front frame: its count, until when its client waits, its answer."""

    count: int
    until: float
    deadline: float
    answer: asyncio.Future[Reply] = field(repr=False)
    since: float = 0.0  # when it came (Unix time)
    who: str = ""
    trace: Any = None  # its request's trace context, when this process traces


class Front:
    """Gathers requests and puts one record per counter for them (FRONT_FRAME_POLICY): for
    `seconds` (fixed); as the batcher's frames do with commits, until the previous put has
    returned and `gap` has passed, `seconds` being the longest wait (auto); or until the last
    moment the put returns before the batchers' next read (beats, `before_beat`)."""

    def __init__(
        self,
        stream: Stream,
        replies: Replies,
        metrics: Metrics,
        seconds: float,
        budget: Callable[[float], float],
        auto: bool = False,
        gap: float = 0.0005,
        give_up: Callable[[Record], Coroutine[Any, Any, None]] | None = None,
        abandon: Callable[[str, int, int, date, str], Coroutine[Any, Any, None]] | None = None,
        before_beat: Callable[[float, float], float | None] | None = None,
    ) -> None:
        """`give_up` and `abandon`: the edge's, for a record whose requests all went, and the
        values of those that went while the others waited. `before_beat` (FRONT_FRAME_POLICY
        beats): given how long a put takes and how long from now a frame may not close, seconds
        until the last moment it may begin and return before a batcher's read, or None where
        there is no such moment (no beats, or shards not listed yet): then `seconds`."""
        self.stream, self.replies, self.metrics = stream, replies, metrics
        self.give_up = give_up or _nothing
        self.abandon = abandon or _nothing
        self.before_beat = before_beat
        self.closing = beats.Times(CLOSING_S, CLOSING_S / 2)
        """How long from when a frame is due to close to when its put has returned: the event
        loop's lateness, the put's own time and its retries (a beat's put that returns late
        makes all its requests wait a beat more)."""
        self._due = 0.0  # monotonic time the open frame is due to close
        self._closed = -seconds  # monotonic time the last frame closed
        # beats: the read (Unix time, less PUT_GUARD_S) the open frame aims for, and the last
        # frame closed; 0 for a second chance (`_longest`), which no second chance follows
        self._aim = self._aimed = 0.0
        self.seconds, self.budget, self.auto, self.gap = seconds, budget, auto, gap
        self._open: dict[str, list[Waiter]] = {}
        self._waiting: dict[int, Waiter] = {}  # every request in a frame, open or sent
        self._numbers = itertools.count()
        self._sweep = Deadlines(self._answer_of)
        self._timer: asyncio.TimerHandle | None = None  # the longest wait
        self._soon: asyncio.TimerHandle | None = None  # auto: the stream is free
        self._putting = 0  # puts in flight
        self._tasks: set[asyncio.Task[None]] = set()
        self.to = ""  # the inbox its records name for pushed replies (infra/adapters/push.py)

    async def take(
        self,
        counter: str,
        count: int,
        timeout: float,
        who: str = "",
        left: Callable[[], bool] | None = None,
    ) -> Reply:
        """The reply for `count` values of `counter`: a slice of the front frame's range, or the
        frame's error. Raises what putting raised (StreamFull, Unavailable), ReplyTimeout or
        BadReply, as a record of its own would; ClientLeft (its values given up) when its
        client is known gone (`left`) as they come."""
        loop = asyncio.get_running_loop()
        now = time.time()
        deadline = now + self.budget(timeout)
        waiter = Waiter(count, now + timeout, deadline, loop.create_future(), now, who)
        if traces.ON:
            waiter.trace = traces.current()
        self._open.setdefault(counter, []).append(waiter)
        if self._timer is None:
            longest = self._longest()
            self._due = time.monotonic() + longest
            self._timer = loop.call_later(longest, self._close)
        self._when_free()
        number = next(self._numbers)
        self._waiting[number] = waiter
        timer = self._sweep.add(loop, number, timeout)
        try:
            # On a timeout (the sweep fails the answer) or the client gone (the answer is
            # cancelled) a request whose frame has not gone out leaves it and allocates nothing;
            # one whose frame has, has its values voided, abandoned, when they come (_deliver).
            # Not asyncio.wait_for: a cancel that lands once the answer is in swallows the cancel
            # and returns the answer, which then went to a client that had left, neither
            # received nor void.
            part = await waiter.answer
        except ReplyTimeout:
            self._leave(counter, waiter)
            raise
        except asyncio.CancelledError:
            self._leave(counter, waiter)
            self._given_up(waiter, who)
            raise
        finally:
            del self._waiting[number]
            if timer is not None:
                timer.cancel()
        if left is not None and left():
            self._given_up(waiter, who)
            raise ClientLeft
        return part

    def _longest(self) -> float:
        """How long a frame opened now gathers at most: `seconds`, or with `before_beat` until
        the last moment its put returns before the next read (a record put sooner waits for the
        same read) that comes `seconds` or more after the last frame closed: on phased beats a
        shard is read every interval / shards, and frames are kept at most one a `seconds`, as
        fixed ones are, whatever the shards (each is a put, a reply item and a read of it); or
        until a second chance at the read the last frame aimed for (`_second_chance`)."""
        if self.before_beat is None:
            return self.seconds
        after = self._closed + self.seconds - time.monotonic()
        likely = self.closing.likely()
        left = self.before_beat(likely, after)
        if left is None:
            return self.seconds
        chance = self._second_chance(left)
        self._aim = 0.0 if chance is not None else time.time() + left + likely
        return max(0.0, left) if chance is None else chance

    def _second_chance(self, left: float) -> float | None:
        """Seconds to a second chance at the read the last frame aimed for, or None. A request
        that comes just after a beat's frame closed would wait a whole beat more, where a put of
        the usual time (the mean, without the deviation the beat's frame leaves room for) still
        returns before that read about half the time. So one more frame a read may close then:
        if its put returns late its records wait for the next read, as they would have. Only
        where that saves a wait of two FRONT_FRAME_MS or more (on phased beats of many shards
        the next read is near anyway, and frames stay one a FRONT_FRAME_MS)."""
        if not self._aimed or self.before_beat is None:
            return None
        mean = self.closing.mean
        chance = self.before_beat(mean, 0.0)
        if chance is None or chance < 0 or left - chance < 2 * self.seconds:
            return None
        if abs(time.time() + chance + mean - self._aimed) > 0.001:
            return None  # another read than the last frame's
        return chance

    def _answer_of(self, number: int) -> asyncio.Future[Reply] | None:
        waiter = self._waiting.get(number)
        return None if waiter is None else waiter.answer

    def _given_up(self, waiter: Waiter, who: str) -> None:
        """Void a waiter's values if they came just as its client went: no one will read them."""
        answer = waiter.answer
        if (
            answer.done()
            and not answer.cancelled()
            and answer.exception() is None
            and answer.result().error is None
        ):
            part = answer.result()
            assert part.day is not None
            self.metrics.replies_abandoned.inc()
            task = asyncio.create_task(
                self.abandon(part.counter, part.first, part.last, part.day, who)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _leave(self, counter: str, waiter: Waiter) -> None:
        group = self._open.get(counter)
        if group is not None and waiter in group:
            group.remove(waiter)
            if not group:
                del self._open[counter]

    def _when_free(self) -> None:
        """auto: close the frame `gap` from now when no put is in flight."""
        if self.auto and self._open and not self._putting and self._soon is None:
            self._soon = asyncio.get_running_loop().call_later(self.gap, self._close)

    def _close(self) -> None:
        for timer in (self._timer, self._soon):
            if timer is not None:
                timer.cancel()
        groups, self._open, self._timer, self._soon = self._open, {}, None, None
        due, self._due = self._due, 0.0
        if not groups:
            return
        self._closed = time.monotonic()
        self._aimed = self._aim
        task = asyncio.create_task(self._send(groups, due), name="front-frame")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, groups: dict[str, list[Waiter]], due: float) -> None:
        """Put the frame `groups` (due to close at monotonic `due`), and deliver its replies;
        when this process traces, in a trace span linked to each of its requests'."""
        if not traces.ON:
            return await self._put(groups, due)
        waiters = [waiter for group in groups.values() for waiter in group]
        with traces.front_frame((waiter.trace for waiter in waiters), len(waiters)):
            await self._put(groups, due)

    async def _put(self, groups: dict[str, list[Waiter]], due: float) -> None:
        sent = time.time()
        hops = self.metrics.hop_seconds
        batches: list[tuple[Record, list[Waiter]]] = []
        for counter, waiters in groups.items():
            self.metrics.front_frame_requests.observe(len(waiters))
            for waiter in waiters:
                hops.observe("front", sent - waiter.since)
            for chunk in _chunks(waiters):
                record = Record(
                    reply_key(),
                    counter,
                    sum(w.count for w in chunk),
                    None,
                    min(w.deadline for w in chunk),
                    sent,
                    runs(chunk),
                    self.to,
                )
                self.replies.expect(record.key)
                batches.append((record, chunk))
        self._putting += 1
        try:
            await self.stream.put([record for record, _ in batches])
        except NumeratorError as exc:  # nothing was put: nothing is allocated
            for record, chunk in batches:
                self.replies.forget(record.key)
                _fail(chunk, exc)
            return
        finally:
            self._putting -= 1
            self._when_free()
        took = time.monotonic() - due
        if self.before_beat is not None and due and took >= 0:  # not closed early (stopping)
            self.closing.add(took)
        self.metrics.records_put.inc(len(batches))
        put = time.time()
        hops.observe("put", put - sent, sum(len(chunk) for _, chunk in batches))
        await asyncio.gather(*(self._deliver(record, chunk, put) for record, chunk in batches))

    async def _deliver(self, record: Record, waiters: list[Waiter], put: float) -> None:
        """Hand each waiter its part of the record's reply (the record put at Unix time `put`)."""
        try:
            reply = await self.replies.wait(record.key, max(w.until for w in waiters) - time.time())
        except (ReplyTimeout, AwsRefused) as exc:
            _fail(waiters, exc)
            await self.give_up(record)  # every request went: none will read what comes
            return
        except BadReply as exc:
            _fail(waiters, exc)
            return
        self.metrics.hop_seconds.observe("reply", time.time() - put, len(waiters))
        gone: list[tuple[int, int, str]] = []
        cursor = reply.first
        for waiter in waiters:
            if reply.error is None:
                part = Reply(
                    reply.key,
                    reply.counter,
                    cursor,
                    cursor + waiter.count - 1,
                    reply.template,
                    reply.day,
                )
                cursor += waiter.count
            else:
                part = reply
            if not waiter.answer.done():
                waiter.answer.set_result(part)
            elif reply.error is None:
                self.metrics.replies_abandoned.inc()
                gone.append((part.first, part.last, waiter.who))
        if gone and reply.day is not None:
            for first, last, who in merged(gone):
                await self.abandon(reply.counter, first, last, reply.day, who)

    async def close(self) -> None:
        """Send what is gathered and wait for the frames in flight (a worker that stops)."""
        self._close()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _nothing(*_: Any) -> None:
    return None


def merged(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Adjacent spans of one requester as one."""
    out: list[tuple[int, int, str]] = []
    for first, last, who in spans:
        if out and out[-1][1] + 1 == first and out[-1][2] == who:
            out[-1] = (out[-1][0], last, who)
        else:
            out.append((first, last, who))
    return out


def runs(waiters: list[Waiter]) -> list[list[Any]]:
    """Who asked, run by run, for the audit trail: [[count, who], ...] in the order the
    record's range is split among the waiters."""
    out: list[list[Any]] = []
    for waiter in waiters:
        if out and out[-1][1] == waiter.who:
            out[-1][0] += waiter.count
        else:
            out.append([waiter.count, waiter.who])
    return out


def _chunks(waiters: Sequence[Waiter]) -> list[list[Waiter]]:
    """The waiters in arrival order, cut where a record's count would pass MAX_RECORD_COUNT."""
    chunks: list[list[Waiter]] = [[]]
    total = 0
    for waiter in waiters:
        if total + waiter.count > MAX_RECORD_COUNT:
            chunks.append([])
            total = 0
        chunks[-1].append(waiter)
        total += waiter.count
    return chunks


def _fail(waiters: Sequence[Waiter], exc: Exception) -> None:
    for waiter in waiters:
        if not waiter.answer.done():
            waiter.answer.set_exception(exc)
