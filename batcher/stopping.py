"""The one signal every job of a batcher watches: stop."""

from __future__ import annotations

import asyncio


class Stopping:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def pause(self, seconds: float) -> bool:
        """Sleep up to `seconds`; False when the batcher is stopping."""
        try:
            await asyncio.wait_for(self._event.wait(), seconds)
        except TimeoutError:
            return True
        return False
