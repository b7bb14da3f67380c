"""The watch for /next clients that go away: so that a request whose client left is cancelled,
and its record with it (its values never allocated, or void, abandoned)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from starlette.types import Message, Receive

# /next watches for its client going away once it has waited this long: watching sooner (and
# sweeping more often) slowed /next on a hot counter at high concurrency, where most requests
# wait longer (docs/performance.md, measurements behind the code).
WATCH_AFTER_S = 0.1


class ClientLeft(Exception):
    """The client left as its answer came: its values are given up, as for one that left
    before (`Watch.left`)."""


class Watch:
    """The /next requests in flight whose clients may go away. Most are answered within
    milliseconds, so none is watched at first: a sweep every half WATCH_AFTER_S starts a
    watcher (reading the request's `receive` for its disconnect) for each request that was
    already waiting at the sweep before — so every request still waiting WATCH_AFTER_S after it
    came is watched by then (a sweep every WATCH_AFTER_S watched some only at twice that, and a
    client that left between was not seen). A task, or a timer, per request cost a fifth of
    /next's rate; this costs two dict operations. A client that leaves sooner is like one whose
    connection drops just after its answer went out: no server can tell it was not read.

    A watcher is a callback on what `receive()` returns when that is a future (granian's is):
    at 1,024 connections nearly every request waits long enough to be watched, and a task
    each — made, stepped, cancelled, unwound — was work every such request paid. Where
    `receive()` is a coroutine (other servers, tests), the watcher is a task that awaits it."""

    def __init__(self, after: float = WATCH_AFTER_S) -> None:
        self.after = after
        self.young: dict[asyncio.Task[Any], Receive] = {}
        self.old: dict[asyncio.Task[Any], Receive] = {}
        self.watchers: dict[asyncio.Task[Any], Any] = {}
        """Per watched request, what is cancelled when it ends: the future its callback is on,
        or the watcher task."""
        self.gone: set[asyncio.Task[Any]] = set()
        self.timer: asyncio.TimerHandle | None = None
        # Asked once: under granian, finding the running loop (or the current task without
        # naming the loop) per request cost a tenth of a /next worker's CPU.
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> asyncio.AbstractEventLoop:
        self.loop = asyncio.get_running_loop()
        return self.loop

    def add(self, task: asyncio.Task[Any], receive: Receive) -> None:
        self.young[task] = receive
        if self.timer is None:
            assert self.loop is not None
            self.timer = self.loop.call_later(self.after / 2, self.sweep)

    def done(self, task: asyncio.Task[Any]) -> None:
        if self.young.pop(task, None) is None:
            self.old.pop(task, None)
            watcher = self.watchers.pop(task, None)
            if watcher is not None:
                watcher.cancel()

    def left(self, task: asyncio.Task[Any]) -> bool:
        """Whether `task`'s client is already known gone, its watcher's callback not yet run:
        granian completes the `receive()` future as it reads the client's leaving and runs its
        callbacks a turn of the loop later, and an answer that came within that turn would go
        to a connection granian had closed — neither received nor void."""
        watcher = self.watchers.get(task)
        if watcher is None or isinstance(watcher, asyncio.Task) or not watcher.done():
            return False
        if watcher.cancelled() or watcher.exception() is not None:
            return False
        left = watcher.result()["type"] == "http.disconnect"
        return bool(left)

    def quieted(self, task: asyncio.Task[Any]) -> bool:
        """Whether `task`'s cancel was its client leaving (`_gone`): then it is taken back, for
        the request to end without an answer; any other cancel the caller raises on."""
        if task not in self.gone:
            return False
        self.gone.discard(task)
        task.uncancel()
        return True

    def sweep(self) -> None:
        self.timer = None
        loop = self.loop
        assert loop is not None
        for task, receive in self.old.items():
            if task not in self.watchers:
                self.watchers[task] = self._listen(task, receive)
        self.old.update(self.young)
        self.young = {}
        if self.old:
            self.timer = loop.call_later(self.after / 2, self.sweep)

    def _listen(self, task: asyncio.Task[Any], receive: Receive) -> Any:
        """Wait for the request's next message: what `done` cancels."""
        message = receive()
        # an attribute, not isinstance(message, Coroutine): an ABC's check was a third of this
        callback = getattr(message, "add_done_callback", None)
        if callback is None:
            # A coroutine (a server other than granian): not yet started, so closing it reads
            # nothing. The watcher asks for the message itself, so that a watcher cancelled
            # before it first runs leaves no coroutine behind that was never awaited.
            close = getattr(message, "close", None)
            if close is not None:
                close()
            assert self.loop is not None
            return self.loop.create_task(self._watch(task, receive))
        callback(functools.partial(self._heard, task, receive))
        return message

    def _heard(
        self, task: asyncio.Task[Any], receive: Receive, message: asyncio.Future[Message]
    ) -> None:
        if message.cancelled() or self.watchers.get(task) is not message:
            return  # the request ended meanwhile
        try:
            kind = message.result()["type"]
        except Exception:  # the server could not read the connection: it is not ours to judge
            return
        if kind == "http.disconnect":
            self._gone(task)
        else:
            self.watchers[task] = self._listen(task, receive)

    async def _watch(self, task: asyncio.Task[Any], receive: Receive) -> None:
        message = await receive()
        while message["type"] != "http.disconnect":
            message = await receive()
        self._gone(task)

    def _gone(self, task: asyncio.Task[Any]) -> None:
        self.gone.add(task)
        task.cancel()
