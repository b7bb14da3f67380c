"""One shard's loop: hold its lease while this batcher's share allows, read its records, collect
a frame (for BACK_FRAME_MS, or until the previous transaction is done: FRAME_POLICY), and hand it
to the applier."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from batcher.applier import Applier
from batcher.frame import Frame, State, collect_for
from batcher.shared import Shared
from batcher.shares import Shares
from batcher.stopping import Stopping
from infra.backoff import Backoff
from infra.errors import ShardEnded, Unavailable
from infra.observe import traces
from infra.ports import Entry, Lease, Stream
from infra.settings import Settings

log = logging.getLogger("numerator.batcher")


@dataclass(frozen=True, slots=True)
class Read:
    """What one read of a shard gave (`ShardLoop._records`): its entries, none when it could not
    be read now; `ended`: the shard is read to its end."""

    entries: list[Entry]
    ended: bool = False


class ShardLoop:
    def __init__(
        self,
        stream: Stream,
        shares: Shares,
        applier: Applier,
        settings: Settings,
        stopping: Stopping,
        shared: Shared,
    ) -> None:
        """`shared`: where the loop says it cannot read its shard, or works again after it died."""
        self.stream, self.shares, self.applier = stream, shares, applier
        self.frames, self.stopping = settings.frames, stopping
        self.shared = shared
        self.hops = applier.metrics.hop_seconds

    async def run(self, shard: str, parents: tuple[str, ...] = ()) -> None:
        """Hold the shard's lease whenever this batcher's share allows, and read it while held."""
        if not await self.shares.parents_ended(parents):
            return
        while shard not in self.shares.ended and not self.stopping.is_set():
            lease = await self.shares.acquire(shard)
            if lease is None:
                return
            kept = await self._serve(shard, lease)
            if kept is not None:
                await self.shares.release(kept)
            self.shares.drop(shard)

    async def _serve(self, shard: str, lease: Lease | None) -> Lease | None:
        """Read and apply the shard until stopping, or its share goes to another batcher: the
        lease to release then; None when there is none (the shard ended, or was taken over)."""
        renewed = time.monotonic()
        limit = self.frames.frame_max_records
        failed = Backoff(base=0.05, cap=1.0)  # the pause after a failed read grows while they do
        began = ended = 0.0  # monotonic times the last frame's transaction began and ended
        taken = 0.0  # monotonic time the last frame took its last records
        while lease is not None:
            if self.shares.surplus(shard):
                break
            stopping = self.stopping.is_set()
            read_at = time.time_ns()  # for the frame's trace span, when this process traces
            got = await self._records(lease, limit, stopping, failed)
            read = (read_at, time.time_ns())
            if got.ended:
                return None
            entries = got.entries
            if time.monotonic() - renewed > self.frames.lease_ttl_s / 3:
                renewed = time.monotonic()
                if (lease := await self.shares.renew(lease)) is None:
                    return None
            if not entries:
                if stopping:
                    break
                self.shared.working(shard, committed=False)
                continue
            # From here to its publish the frame holds up the replies of the frames of this
            # batcher's other shards, to be published with them (batcher/gather.py).
            with self.applier.gather.applying() as token:
                frame = Frame(entries)
                if len(frame) < limit and not stopping:
                    await self._collect(shard, frame, limit, (began, ended, taken))
                taken = time.monotonic()
                if self.stream.durable:  # the hop from the read to the frame's commit
                    self.hops.observe("frame", time.time() - read[1] / 1e9, len(frame))
                began = time.monotonic()
                with traces.frame(frame.entries, shard, read):
                    lease = await self.applier.apply(frame, lease, token)
                ended = time.monotonic()
            if frame.state is not State.OPEN:
                self.shared.working(shard, committed=True)
        return lease

    async def _records(self, lease: Lease, limit: int, stopping: bool, failed: Backoff) -> Read:
        """The shard's next records: none when it cannot be read now (after a pause that grows
        while it cannot); or that it is read to its end."""
        shard = lease.shard
        try:
            entries = await self.stream.read(shard, lease.sequence, limit, 0 if stopping else 0.1)
        except ShardEnded:
            await self.shares.end(lease)
            return Read([], ended=True)
        except Unavailable as exc:
            log.warning("cannot read shard %s: %s", shard, exc)
            self.shared.readable(shard, False)
            await asyncio.sleep(failed.next() + 0.1)
            return Read([])
        self.shared.readable(shard, True)
        failed.reset()
        self._arrived(entries)
        return Read(list(entries))

    def _arrived(self, entries: Sequence[Entry]) -> None:
        """The hop from each entry's arrival on the stream (its stamp) to its read's return:
        the wait for the shard's beat and the read."""
        now = time.time()
        for entry in entries:
            if entry.arrived:
                self.hops.observe("stream", now - entry.arrived)

    async def _collect(
        self, shard: str, frame: Frame, limit: int, last: tuple[float, float, float]
    ) -> None:
        """Hold the frame open as long as the frame policy says (`collect_for`), and on the
        machine's batcher until each busy worker has put since the last frame took its records
        (`Hub.round`), then read in what came meanwhile. The frame opened when its oldest
        record was put, not when it was read: records that waited out the previous commit do
        not wait a whole frame more. `last`: when the last frame's transaction began and
        ended, and when it took its last records (monotonic times)."""
        frames = self.frames
        began, ended, taken = last
        spacing = 1 / frames.max_frames_per_s if frames.max_frames_per_s else 0.0
        now = time.monotonic()
        waited = time.time() - frame.opened(default=time.time())
        delay = collect_for(
            frames.frame_policy,
            frames.back_frame_ms / 1000,
            waited,
            now - ended,
            frames.frame_min_ms / 1000,
            spacing,
            now - began,
        )
        held = getattr(self.stream, "round", None)  # the machine's batcher's, else none
        if delay > 0 or held is not None:
            if delay > 0:
                await asyncio.sleep(delay)
            if held is not None:
                await held(taken, now + max(0.0, frames.back_frame_ms / 1000 - waited))
            with contextlib.suppress(ShardEnded, Unavailable):  # the next read says so
                more = await self.stream.read(shard, frame.last_sequence, limit - len(frame), 0)
                self._arrived(more)
                frame.add(more)
