"""What a fault-matrix cell's fault did and when, and /healthz during its outage: the timeline
test_matrix.py and test_failover.py print beside their verdicts."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import httpx

from tests.forger import Forger


@dataclass
class Timeline:
    """What a cell's fault did and when (monotonic), and /healthz during an outage."""

    began: float
    said: list[str]
    killed: float | None = None
    health: list[tuple[float, int]] | None = None
    forger: Forger | None = None

    def note(self, what: str) -> None:
        self.said.append(f"{time.monotonic() - self.began:5.1f}s {what}")

    async def sample(self, url: str, stop: asyncio.Event) -> None:
        """/healthz every 0.25 s until `stop` (guarantee 9: red within seconds; printed)."""
        self.health = []
        began = time.monotonic()
        async with httpx.AsyncClient(timeout=2) as client:
            while not stop.is_set():
                try:
                    status = (await client.get(url + "/healthz")).status_code
                except httpx.HTTPError:
                    status = 0
                self.health.append((time.monotonic() - began, status))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.25)

    def healthline(self) -> str:
        if not self.health:
            return ""
        red = [at for at, status in self.health if status != 200]
        first = f", the first {red[0]:.1f} s into the outage" if red else ""
        return f"/healthz during the outage: {len(red)} of {len(self.health)} not 200{first}"
