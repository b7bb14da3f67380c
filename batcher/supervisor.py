"""Supervision of the shard loops: one task per shard read, started again when it dies of a bug."""

from __future__ import annotations

import asyncio
import logging

from batcher.shard import ShardLoop
from batcher.shared import Shared
from batcher.shares import Shares
from batcher.stopping import Stopping
from infra.observe.metrics import Metrics

log = logging.getLogger("numerator.batcher")


class Supervisor:
    def __init__(
        self,
        loop: ShardLoop,
        shares: Shares,
        metrics: Metrics,
        stopping: Stopping,
        shared: Shared,
    ) -> None:
        self.loop, self.shares, self.metrics, self.stopping = loop, shares, metrics, stopping
        self.shared = shared
        self.tasks: list[asyncio.Task[None]] = []
        self._reading: set[str] = set()
        self._parents: dict[str, tuple[str, ...]] = {}  # per shard read: its parents not ended

    def follow(self, shards: dict[str, tuple[str, ...]]) -> None:
        """Read every shard not read yet (a reshard's children wait for their parents)."""
        for shard, parents in shards.items():
            if shard not in self._reading:
                self._parents[shard] = tuple(p for p in parents if p in shards)
                self._read(shard)

    def _read(self, shard: str) -> None:
        """Start the shard's loop."""
        self._reading.add(shard)
        run = self.loop.run(shard, self._parents[shard])
        task = asyncio.create_task(run, name=f"shard-{shard}")
        task.add_done_callback(self._died)
        self.tasks.append(task)

    def _died(self, task: asyncio.Task[None]) -> None:
        """A shard's loop ends only when stopping or at a shard's end; anything else is a bug.
        It is logged with its traceback, counted, shown on /healthz, and the loop starts again
        after a jittered backoff (up to 1 s, doubling to 30 s while it keeps dying), from the
        shard's checkpoint: a frame it had not committed is read again, one it had is not
        applied twice. A bug that one frame trips must not leave its clients waiting for ever."""
        error = None if task.cancelled() else task.exception()
        if error is None:
            return
        shard = task.get_name().removeprefix("shard-")
        delay = self.shared.died(shard)
        self._reading.discard(shard)
        self.shares.drop(shard)
        self.metrics.shard_restarts.inc()
        if self.stopping.is_set():
            log.error("%s stopped", task.get_name(), exc_info=error)
            return
        log.error("%s stopped; reading it again in %.1fs", task.get_name(), delay, exc_info=error)
        asyncio.get_running_loop().call_later(delay, self._again, shard)

    def _again(self, shard: str) -> None:
        if not self.stopping.is_set() and shard not in self._reading:
            self._read(shard)
