"""The event loop numerator's own processes run on: uvloop where it is installed, as granian picks
for the HTTP workers, so that timers and costs are the same in every process (the bench's
generator, `numerator batcher`); asyncio's otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run `main()` to its end on a new event loop; its result."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - installed everywhere but Windows
        return asyncio.run(main())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())
