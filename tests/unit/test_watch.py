"""The watch for /next clients that go away (functions/fastpath.py: Watch): every request still
waiting WATCH_AFTER_S after it came is watched by then, whatever the phase of the sweeps."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from functions.watch import Watch


async def test_a_request_that_came_just_after_a_sweep_is_watched_within_after() -> None:
    after = 0.2
    watch = Watch(after)
    watch.start()
    gone_at: dict[str, float] = {}

    async def waiting(name: str) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            gone_at[name] = time.monotonic()
            raise

    async def left() -> dict[str, Any]:
        return {"type": "http.disconnect"}  # its client is gone: seen once it is watched

    first = asyncio.create_task(waiting("first"))
    watch.add(first, left)  # the sweeps start with it
    await asyncio.sleep(after + 0.01)  # just past a sweep, at either pace
    second = asyncio.create_task(waiting("second"))
    came = time.monotonic()
    watch.add(second, left)
    for task in (first, second):
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 2)
        watch.done(task)
    assert "second" in gone_at and gone_at["second"] - came <= after * 1.5, gone_at["second"] - came


async def watched_by_a_future() -> tuple[Watch, list[asyncio.Future[dict[str, Any]]], Any]:
    """A watch, the futures a granian-like receive() has returned, and a request that has
    waited two sweeps: watched by the second."""
    after = 0.02
    watch = Watch(after)
    loop = watch.start()
    asked: list[asyncio.Future[dict[str, Any]]] = []

    def receive() -> asyncio.Future[dict[str, Any]]:
        asked.append(loop.create_future())
        return asked[-1]

    request = asyncio.create_task(asyncio.sleep(10))
    watch.add(request, receive)
    await asyncio.sleep(after * 3)
    return watch, asked, request


async def test_a_future_from_receive_is_watched_by_a_callback_and_a_disconnect_cancels() -> None:
    """granian's receive() returns a future: the watch puts a callback on it, no task, and
    listens again after a message that is not the disconnect."""
    watch, asked, request = await watched_by_a_future()
    assert watch.watchers[request] is asked[0], "the watcher is the future, not a task"
    asked[0].set_result({"type": "http.request", "body": b"", "more_body": False})
    await asyncio.sleep(0)
    assert len(asked) == 2 and watch.watchers[request] is asked[1], "it listens again"
    assert not request.cancelled()
    asked[1].set_result({"type": "http.disconnect"})
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(request, 1)
    assert request.cancelled() and request in watch.gone
    watch.done(request)


async def test_a_request_answered_before_its_client_leaves_is_not_cancelled() -> None:
    watch, asked, request = await watched_by_a_future()
    watch.done(request)  # answered
    assert asked[0].cancelled(), "its watcher is cancelled with it"
    await asyncio.sleep(0)
    assert not request.cancelled() and request not in watch.gone
    request.cancel()


async def test_a_watcher_ended_before_it_runs_leaves_no_receive_unawaited() -> None:
    """A coroutine receive() (httpx's ASGITransport, uvicorn): a request answered between the
    sweep that starts its watcher and the watcher's first step must leave no receive()
    coroutine never awaited (a RuntimeWarning, an error under the suite's filterwarnings)."""
    watch = Watch(0.02)
    watch.start()
    made: list[Any] = []

    async def listening() -> dict[str, Any]:
        await asyncio.sleep(10)
        return {"type": "http.disconnect"}

    def receive() -> Any:
        made.append(listening())
        return made[-1]

    request = asyncio.create_task(asyncio.sleep(10))
    watch.add(request, receive)
    watch.sweep()  # young → old
    watch.sweep()  # old: its watcher task is made, not yet run
    assert request in watch.watchers
    watch.done(request)  # answered before the watcher's first step
    request.cancel()
    await asyncio.sleep(0.01)
    assert made, "receive() was asked"
    # a coroutine keeps its frame until it has run to its end or been closed
    assert all(coro.cr_frame is None for coro in made), "a receive() was left never awaited"


async def test_a_client_known_gone_before_its_callback_runs_is_left() -> None:
    """granian completes receive()'s future as it reads the client's leaving and runs its
    callbacks a turn later: `left` sees the leaving in between (an answer that came in that
    turn is given up, not sent to a closed connection)."""
    watch, asked, request = await watched_by_a_future()
    assert not watch.left(request), "not done: still there"
    asked[0].set_result({"type": "http.disconnect"})  # its callback is due, not run
    assert watch.left(request)
    watch.done(request)
    assert not watch.left(request), "ended: no longer watched"
    request.cancel()


async def test_a_message_that_is_not_the_leaving_is_not_left() -> None:
    watch, asked, request = await watched_by_a_future()
    asked[0].set_result({"type": "http.request", "body": b"", "more_body": False})
    assert not watch.left(request)
    watch.done(request)
    request.cancel()
