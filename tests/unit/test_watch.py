"""The watch for /next clients that go away (functions/fastpath.py: Watch): every request still
waiting WATCH_AFTER_S after it came is watched by then, whatever the phase of the sweeps."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from functions.fastpath import Watch


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
