"""In-process adapters for the Stream and Replies ports: the embedded mode's stream and replies."""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Sequence

from infra.deadlines import Deadlines
from infra.errors import StreamFull
from infra.observe.metrics import Metrics
from infra.ports import Entry
from infra.wire import Demand, Reply


class MemoryStream:
    """One shard, held in this process. A record is kept until a read asks for what follows it
    (the reader has committed past it), so a read may be repeated from any sequence not yet passed;
    nothing survives the process, so the stream is not durable. The shard's name is unique per
    process, so its checkpoint row never mixes with another process's."""

    name = "memory"
    durable = False
    reads = None  # a read waits for nothing but records

    def __init__(self, capacity: int = 50_000) -> None:
        self.capacity = capacity
        self.shard = f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._entries: deque[Entry] = deque()
        self._sequence = 0
        self._ready = asyncio.Event()
        self.round: Callable[[float, float], Awaitable[None]] | None = None
        """The machine's batcher's (`Hub.round`): wait, from one monotonic time until another,
        for a put of each busy worker; None elsewhere."""

    def __len__(self) -> int:
        return len(self._entries)

    async def put(self, records: Sequence[Demand], shard: str | None = None) -> None:
        self.put_now(records)  # one shard

    def put_now(self, records: Sequence[Demand]) -> None:
        """`put`, from a callback (the machine's batcher taking a worker's records)."""
        if len(self._entries) + len(records) > self.capacity:
            raise StreamFull(f"{len(self._entries)} records are waiting for the batcher")
        for record in records:
            self._sequence += 1
            self._entries.append(Entry(self.shard, str(self._sequence), record, key=record.key))
        self._ready.set()

    async def shards(self) -> dict[str, tuple[str, ...]]:
        return {self.shard: ()}

    async def read(self, shard: str, after: str | None, limit: int, wait: float) -> list[Entry]:
        entries = self._entries
        if after is not None and entries:
            # Sequences in the deque are consecutive: drop the passed ones by count, parsing
            # one sequence per read rather than one per record.
            for _ in range(min(len(entries), int(after) - int(entries[0].sequence) + 1)):
                entries.popleft()
        if not entries and wait > 0:
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), wait)
            except TimeoutError:
                return []
        if len(entries) <= limit:
            return list(entries)
        return list(itertools.islice(entries, limit))

    def lag(self, shard: str) -> float | None:
        return None


class MemoryReplies:
    """Futures keyed by reply key. A reply published for a key nobody waits on any more (its client
    timed out) is dropped; one with values is counted as abandoned: those values are the gaps of
    guarantee 5. Timeouts are swept (infra/deadlines.py)."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        self._waiting: dict[str, asyncio.Future[Reply]] = {}
        self._sweep = Deadlines(self._waiting.get)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.metrics = metrics or Metrics()

    def expect(self, key: str) -> None:
        """Register interest before the record is put, so a fast reply is never missed."""
        loop = self._loop or self._started()
        self._waiting[key] = loop.create_future()

    def _started(self) -> asyncio.AbstractEventLoop:
        # Asked once: finding the running loop per request showed in a granian worker's CPU
        # (docs/performance.md, measurements behind the code).
        self._loop = asyncio.get_running_loop()
        return self._loop

    def forget(self, key: str) -> None:
        self._waiting.pop(key, None)

    async def publish(self, replies: Sequence[Reply]) -> None:
        self.deliver(replies)

    def deliver(self, replies: Sequence[Reply]) -> None:
        """`publish`, from a callback (replies come from the machine's batcher)."""
        waiting = self._waiting
        for reply in replies:
            future = waiting.get(reply.key)
            if future is None:
                if reply.error is None:  # an error reply held no values: nothing was lost
                    self.metrics.replies_abandoned.inc()
            elif not future.done():
                future.set_result(reply)

    def drop(self, exc: Exception, but: Collection[str] = ()) -> int:
        """Fail every reply awaited with `exc` (their batcher went away); how many there were,
        less those whose keys are in `but` (records whose put fails too: their requests are
        answered as the put's failure says)."""
        waiting = list(self._waiting.items())
        self._waiting.clear()  # the same dict: the sweep looks keys up in it
        for _, future in waiting:
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved here: a reply expected may not be awaited yet
        return sum(key not in but for key, _ in waiting)

    async def wait(self, key: str, timeout: float) -> Reply:
        loop = self._loop or self._started()
        future = self._waiting.get(key)
        if future is None:
            future = self._waiting[key] = loop.create_future()
        timer = self._sweep.add(loop, key, timeout)
        try:
            return await future
        finally:
            if timer is not None:
                timer.cancel()
            self._waiting.pop(key, None)
