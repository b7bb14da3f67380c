"""The lane: an embedded worker's plain /next requests — one value each, no Idempotency-Key, no
body, no API key to check — gathered per counter over one turn of the event loop and put as ONE
record, the range of its reply handed out among them in the order they came. The batcher then
takes, checks, allocates, audits and answers a counter's requests of a turn once, not once each:
what a request pays over a bare HTTP answer is most of what /next cost (docs/performance.md, "The
lane").

A request whose client leaves before its turn ends leaves the gathering and costs no number; one
whose client leaves after has its value voided, abandoned, as a front frame's are
(functions/front.py). A record that cannot be put, or whose reply does not come in time (its
cancel put, as for a record of its own), fails every request of it alike.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import date
from typing import Any

from functions.front import merged
from infra.errors import Unavailable
from infra.wire import MAX_RECORD_COUNT, Record, Reply, reply_key

Taker = tuple["asyncio.Future[tuple[Reply, int]]", str]
"""A request in the lane: the future its value comes on (the reply, and its own value), and who
sent it (for the audit trail)."""


class Lane:
    """The counters' open gatherings, closed together on the loop's next turn."""

    def __init__(
        self,
        deliver: Callable[[Record, float], Awaitable[Reply]],
        timeout: Callable[[], float],
        budget: Callable[[float], float],
        abandon: Callable[[str, int, int, date, str], Coroutine[Any, Any, None]],
    ) -> None:
        """`deliver` puts a record and awaits its reply for up to the given seconds (raising as
        the edge's own wait does); `timeout` is how long a request waits, `budget` how long of
        it a record may wait for its frame; `abandon` voids values no one will read."""
        self.deliver, self.timeout, self.budget, self.abandon = deliver, timeout, budget, abandon
        self.open: dict[str, list[Taker]] = {}
        self.sending: dict[asyncio.Task[None], list[Taker]] = {}
        """The records put and not yet answered: each one's task, and its requests."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.tasks: set[asyncio.Task[None]] = set()  # voids on their way

    def take(self, counter: str, who: str) -> asyncio.Future[tuple[Reply, int]]:
        """The future a request's value of `counter` comes on, with its reply."""
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[Reply, int]] = loop.create_future()
        takers = self.open.get(counter)
        if takers is None:
            if not self.open:
                loop.call_soon(self.close)
            self.open[counter] = [(future, who)]
        else:
            takers.append((future, who))
        return future

    def gone(self, counter: str, future: asyncio.Future[tuple[Reply, int]], who: str) -> None:
        """A request whose client left: out of its gathering if that is still open (no number);
        its value voided if it had come. One whose record is out waits for it: its value is
        voided as it comes (`_hand_out`) — unless every request of the record has left, when the
        record's wait is cancelled and so the record itself, as a lone request's would be (its
        values never allocated, or void)."""
        if future.done() and not future.cancelled():
            if future.exception() is None:
                reply, value = future.result()
                if reply.error is None:
                    self.void(reply, [(value, value, who)])
            return
        takers = self.open.get(counter)
        if takers is not None:
            for at, (waiting, _) in enumerate(takers):
                if waiting is future:
                    del takers[at]
                    if not takers:
                        del self.open[counter]
                    return
        for task, sent in self.sending.items():
            if any(waiting is future for waiting, _ in sent):
                if all(waiting.cancelled() for waiting, _ in sent):
                    task.cancel()
                return

    def close(self) -> None:
        """Put each counter's gathering as a record (or a few: MAX_RECORD_COUNT values each)."""
        opened, self.open = self.open, {}
        assert self.loop is not None
        for counter, takers in opened.items():
            for at in range(0, len(takers), MAX_RECORD_COUNT):
                chunk = takers[at : at + MAX_RECORD_COUNT]
                task = self.loop.create_task(self._send(counter, chunk))
                self.sending[task] = chunk
                task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        del self.sending[task]

    async def _send(self, counter: str, takers: list[Taker]) -> None:
        timeout = self.timeout()
        sent = time.time()
        record = Record(
            reply_key(), counter, len(takers), None, sent + self.budget(timeout), sent, runs(takers)
        )
        try:
            reply = await self.deliver(record, timeout)
        except asyncio.CancelledError:  # its requests all left (`gone`), or the worker stops
            _fail(takers, Unavailable("the worker is stopping"))
            raise
        except Exception as exc:  # the wait's own failures (504, 503, 502), and any other
            _fail(takers, exc)
            return
        self._hand_out(reply, takers)

    def _hand_out(self, reply: Reply, takers: list[Taker]) -> None:
        """Each request's value, in the order they came; those whose clients left, voided."""
        if reply.error is not None:
            for future, _ in takers:
                if not future.done():
                    future.set_result((reply, 0))
            return
        gone: list[tuple[int, int, str]] = []
        value = reply.first
        for future, who in takers:
            if not future.done():
                future.set_result((reply, value))
            else:
                gone.append((value, value, who))
            value += 1
        if gone:
            self.void(reply, gone)

    def void(self, reply: Reply, spans: list[tuple[int, int, str]]) -> None:
        """Void, abandoned, the values of `spans` of `reply` (adjacent ones of one sender as one),
        from a task of their own."""
        assert reply.day is not None and self.loop is not None
        for first, last, who in merged(spans):
            task = self.loop.create_task(self.abandon(reply.counter, first, last, reply.day, who))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)


def runs(takers: list[Taker]) -> list[list[Any]]:
    """Who asked, run by run, for the audit trail: [[count, who], ...] in the order the record's
    range is handed out (as a front frame's record says it)."""
    return [[len(list(run)), who] for who, run in itertools.groupby(who for _, who in takers)]


def _fail(takers: list[Taker], exc: BaseException) -> None:
    for future, _ in takers:
        if not future.done():
            future.set_exception(exc)
