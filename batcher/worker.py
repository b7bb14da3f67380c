"""The batcher: the jobs one batcher process does, wired together. Its share of the shards and
their leases (`shares`), one loop per shard it holds (`shard`: read, collect; `applier`: apply,
commit, publish), the supervision of those loops (`supervisor`), what it knows of counters and
of what records took lately (`known`, `recent`), and its chores (`chores`: the sweep, the anchoring,
pruning)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from datetime import datetime

from batcher.applier import Applier
from batcher.chores import Anchoring, Prune, Sweep
from batcher.known import Known
from batcher.recent import Recent
from batcher.shard import ShardLoop
from batcher.shared import Shared
from batcher.shares import Shares
from batcher.stopping import Stopping
from batcher.supervisor import Supervisor
from infra.adapters.push import Pusher
from infra.clock import utc_now
from infra.errors import NumeratorError
from infra.faults import Faults
from infra.observe.health import ALIVE_EVERY_S
from infra.observe.metrics import Metrics
from infra.ports import Anchors, BatcherStore, Replies, Stream
from infra.settings import Settings

log = logging.getLogger("numerator.batcher")

SHARDS_EVERY_S = 10.0  # how often the shard list is read again, to find a reshard's children


class Batcher:
    def __init__(
        self,
        stream: Stream,
        replies: Replies,
        store: BatcherStore,
        settings: Settings,
        metrics: Metrics,
        clock: Callable[[], datetime] = utc_now,
        owner: str | None = None,
        anchors: Anchors | None = None,
        faults: Faults | None = None,
        push: Pusher | None = None,
    ) -> None:
        """`faults`: the crash tests' switches (Faults.from_env, at the program's edge);
        `push`: what pushes committed replies to the edges that wait for them (none: the
        reply table alone)."""
        self.stream, self.store, self.metrics = stream, store, metrics
        self.owner = owner or uuid.uuid4().hex
        self.stopping = Stopping()
        self.shared = Shared()  # what its jobs share: trouble, restarts, replies published
        frames, retention = settings.frames, settings.retention
        self.shares = Shares(
            stream,
            replies,
            store,
            store,
            self.owner,
            frames.lease_ttl_s,
            metrics,
            self.stopping,
            self.shared,
        )
        self.known = Known(store, store, clock)
        applier = Applier(
            stream,
            replies,
            store,
            self.shares,
            self.known,
            Recent(store, settings.edge.reply_timeout_s),
            settings,
            metrics,
            faults or Faults(),
            self.shared,
            push,
        )
        loop = ShardLoop(stream, self.shares, applier, settings, self.stopping, self.shared)
        self.supervisor = Supervisor(loop, self.shares, metrics, self.stopping, self.shared)
        self.alerts: dict[str, str] = {}  # what a person must look at: /healthz's `alerts`
        self.anchoring = Anchoring(
            stream, store, anchors, self.owner, retention, self.stopping, metrics, self.alerts
        )
        self.prune = Prune(store, retention, self.stopping, anchors, self.owner)
        self._chores = {
            "prune": self.prune.run,
            "confirmations": Sweep(stream, store, retention, self.stopping).run,
            "trail": self.anchoring.run,
        }
        self._every = min(SHARDS_EVERY_S, frames.lease_ttl_s / 3)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def healthy(self) -> bool:
        """Nothing is wrong now (Shared.healthy)."""
        return self.shared.healthy

    @property
    def trouble(self) -> list[str]:
        return self.shared.trouble()

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """Every task it runs: the shard loops and the chores."""
        return [*self.supervisor.tasks, *self._tasks]

    async def start(self) -> None:
        shards = await self.stream.shards()
        if self.stream.durable:
            await self.shares.balance(shards)
        self.supervisor.follow(shards)
        for name, run in self._chores.items():
            self._tasks.append(asyncio.create_task(run(), name=name))
        if self.stream.durable:
            self._tasks.append(asyncio.create_task(self._watch_shards(), name="shards"))
            self._tasks.append(asyncio.create_task(self._heartbeat(), name="alive"))

    async def stop(self) -> None:
        """Apply what is already on the stream, publish, release the leases, and return."""
        self.stopping.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.supervisor.tasks.clear()
        self._tasks.clear()
        if self.stream.durable:
            with contextlib.suppress(NumeratorError):
                await self.store.leave(self.stream.name, self.owner)

    async def _watch_shards(self) -> None:
        while await self.stopping.pause(self._every):
            try:
                shards = await self.stream.shards()
                await self.shares.balance(shards)
                self.supervisor.follow(shards)
            except NumeratorError as exc:
                log.warning("cannot list the stream's shards or the batchers: %s", exc)

    async def _heartbeat(self) -> None:
        """Say this batcher is alive every ALIVE_EVERY_S, so that an edge's /healthz knows
        within BATCHER_ALIVE_S when no batcher is left (the shares move at their own pace)."""
        while await self.stopping.pause(ALIVE_EVERY_S):
            try:
                await self.store.alive(self.stream.name, self.owner)
            except NumeratorError as exc:
                log.debug("cannot say this batcher is alive: %s", exc)
