"""Timeouts of many waits, swept rather than timed one by one: waits that share one timeout have
their deadlines in order, and a sweep every SWEEP_S seconds fails the overdue ones at the front of
a queue — cheaper on the hot path than a timer (or an `asyncio.timeout`) per request. A wait whose
deadline comes before the last one queued (a shorter timeout) gets a timer of its own."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from infra.errors import ReplyTimeout

Key = TypeVar("Key", bound=Hashable)

SWEEP_S = 0.05


class Deadlines(Generic[Key]):
    """Deadlines by key; `find(key)` gives the key's future if it is still awaited. The queue
    holds keys, not futures, so that a wait that ended keeps nothing alive until its deadline."""

    def __init__(self, find: Callable[[Key], asyncio.Future[Any] | None]) -> None:
        self.find = find
        self._deadlines: deque[tuple[float, Key, float]] = deque()
        self._sweeping: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(
        self, loop: asyncio.AbstractEventLoop, key: Key, timeout: float
    ) -> asyncio.TimerHandle | None:
        """Fail `key`'s future with ReplyTimeout `timeout` seconds from now, if it is still
        awaited; a timer to cancel when the wait ends, for one out of order (else None)."""
        self._loop = loop
        deadline = loop.time() + timeout
        if self._deadlines and deadline < self._deadlines[-1][0]:
            future = self.find(key)
            return None if future is None else loop.call_later(timeout, expire, future, timeout)
        self._deadlines.append((deadline, key, timeout))
        if self._sweeping is None:
            self._sweeping = loop.call_later(SWEEP_S, self._sweep)
        return None

    def _sweep(self) -> None:
        loop = self._loop
        assert loop is not None
        now, deadlines, find = loop.time(), self._deadlines, self.find
        while deadlines and deadlines[0][0] <= now:
            _, key, timeout = deadlines.popleft()
            future = find(key)
            if future is not None:
                expire(future, timeout)
        self._sweeping = loop.call_later(SWEEP_S, self._sweep) if deadlines else None


def expire(future: asyncio.Future[Any], timeout: float) -> None:
    if not future.done():
        future.set_exception(ReplyTimeout(f"no reply within {timeout:g}s"))
