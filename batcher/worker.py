"""The batcher: one loop per shard it holds a lease on. Each loop collects a frame (for
BACK_FRAME_MS, or until the previous transaction is done: FRAME_POLICY), applies it in one
transaction, then publishes its replies.

Several batchers share a durable stream's shards: each says it is alive every LEASE_TTL_S / 3 and
holds its share of the open shards (the live batchers in the order they joined, the first ones
taking one more when the shards do not divide evenly: a batcher that joins knows before it claims
that the shards already held are not its own). One that holds more gives the surplus up between two
frames; one that holds fewer takes free or expired leases. A dead batcher's leases expire after
LEASE_TTL_S and the others' shares grow to take them.

On a durable stream a frame's replies are also held in its transaction until they are published,
so that whoever owns the shard next publishes what a crash between commit and publish left out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from batcher.allocation import Basis, Outcome, apply, decode_replies
from batcher.frame import Frame, State, collect_for
from infra.backoff import Backoff, Retries
from infra.clock import utc_now
from infra.counters import Counter
from infra.errors import (
    AwsRefused,
    LeaseLost,
    NumeratorError,
    ShardEnded,
    StoreError,
    Unavailable,
)
from infra.ledger import ABANDONED, NOT_CONFIRMED
from infra.observe.health import ALIVE_EVERY_S
from infra.observe.metrics import Metrics
from infra.ports import Anchors, Entry, Lease, Replies, Store, Stream
from infra.settings import Settings
from infra.wire import MAX_VOID, Cancel, Demand, Record, Reply, ReplyError, Void, reply_key

log = logging.getLogger("numerator.batcher")

PRUNE_EVERY_S = 60.0
MARK_EVERY_S = 1.0  # the ends of edges are chained within this of being known
# An edge silent this long is chained as dead: well past EDGE_DEAD_S (when the report begins to
# list its values as unsure, from its `edges` row), so that an edge that was only stalled for a
# few seconds and comes back is not marked dead for good.
MARK_DEAD_S = 30.0
# A fault for the crash tests, not a setting: every frame waits this long between its commit and
# its publish, and says so, so that a test can SIGKILL the batcher at the worst moment.
PAUSE_BEFORE_PUBLISH_S = float(os.environ.get("NUMERATOR_PAUSE_BEFORE_PUBLISH_S") or 0)
SHARDS_EVERY_S = 10.0  # how often the shard list is read again, to find a reshard's children
# Counter definitions are read once and kept this long: only a counter's retention changes
# (PATCH /counters/{name}), and its audit rows follow within this time.
COUNTERS_FRESH_S = 30.0
CANCEL_MARGIN_S = 10.0  # a cancel is put right after its edge gives up; allow it this to arrive


def not_confirmed(counter: str, spans: list[tuple[str, int, int]]) -> list[Void]:
    """The void records, reason not-confirmed, for a counter's unconfirmed (period, first,
    last) spans, each at most MAX_VOID values."""
    return [
        Void(reply_key(), counter, first, min(last, first + MAX_VOID - 1), NOT_CONFIRMED, period)
        for period, low, last in spans
        for first in range(low, last + 1, MAX_VOID)
    ]


def dead(shard: str) -> str:
    """The trouble a shard's dead loop shows on /healthz, named as its task is."""
    return f"dead shard-{shard}"


class Batcher:
    def __init__(
        self,
        stream: Stream,
        replies: Replies,
        store: Store,
        settings: Settings,
        metrics: Metrics,
        clock: Callable[[], datetime] = utc_now,
        owner: str | None = None,
        anchors: Anchors | None = None,
    ) -> None:
        self.stream, self.replies, self.store = stream, replies, store
        self.anchors = anchors
        self.settings, self.metrics, self.clock = settings, metrics, clock
        self.owner = owner or uuid.uuid4().hex
        self.counters: dict[str, Counter] = {}
        self._counters_read = time.monotonic()  # when `counters` was last emptied
        # What records took lately, by reply key, for their cancels; oldest first.
        self._recent: dict[str, tuple[str, str, int, int]] = {}
        self._recent_since: deque[tuple[float, list[tuple[str, tuple[str, str, int, int]]]]] = (
            deque()
        )
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._reading: set[str] = set()
        self._published: dict[str, list[int]] = {}  # per shard: held replies since published
        self._trouble: set[str] = set()  # what is wrong now: "frames", "read <shard>", ...
        self._held: set[str] = set()  # shards whose lease this batcher holds (or is taking)
        self._share = math.inf  # how many shards it should hold: all, until it knows the others
        self._ended: set[str] = set()  # shards read to their end, by this batcher or another
        self._epochs: dict[str, int] = {}  # per shard: the lease epoch this batcher last held
        self._parents: dict[str, tuple[str, ...]] = {}  # per shard read: its parents not ended
        self._restarts: dict[str, Backoff] = {}  # per shard whose loop died: when to try again
        # per (counter, period): the highest value the trail holds (Basis.floors), and the
        # counters whose floor was read since `counters` was last emptied
        self._floors: dict[tuple[str, str], int] = {}
        self._floored: set[str] = set()

    @property
    def healthy(self) -> bool:
        """Nothing is wrong now: no frame being retried, no shard that cannot be read, no shard
        loop dead. Each trouble clears itself when the thing works again, so a passing outage
        does not leave a container's health check failing for ever."""
        return not self._trouble

    @property
    def trouble(self) -> list[str]:
        return sorted(self._trouble)

    async def start(self) -> None:
        shards = await self.stream.shards()
        if self.stream.durable:
            await self._balance(shards)
        await self._follow(shards)
        self._tasks.append(asyncio.create_task(self._prune(), name="prune"))
        self._tasks.append(asyncio.create_task(self._sweep(), name="confirmations"))
        self._tasks.append(asyncio.create_task(self._trail(), name="trail"))
        if self.stream.durable:
            self._tasks.append(asyncio.create_task(self._watch_shards(), name="shards"))
            self._tasks.append(asyncio.create_task(self._heartbeat(), name="alive"))

    async def stop(self) -> None:
        """Apply what is already on the stream, publish, release the leases, and return."""
        self._stopping.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.stream.durable:
            with contextlib.suppress(NumeratorError):
                await self.store.leave(self.stream.name, self.owner)

    async def _follow(self, shards: dict[str, tuple[str, ...]]) -> None:
        for shard, parents in shards.items():
            if shard not in self._reading:
                self._parents[shard] = tuple(p for p in parents if p in shards)
                self._read(shard)

    def _read(self, shard: str) -> None:
        """Start the shard's loop."""
        self._reading.add(shard)
        task = asyncio.create_task(self._run(shard, self._parents[shard]), name=f"shard-{shard}")
        task.add_done_callback(self._died)
        self._tasks.append(task)

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
        self._trouble.add(dead(shard))
        self._reading.discard(shard)
        self._held.discard(shard)
        self.metrics.leases.set(len(self._held))
        self.metrics.restarts.inc()
        if self._stopping.is_set():
            log.error("%s stopped", task.get_name(), exc_info=error)
            return
        delay = self._restarts.setdefault(shard, Backoff(base=1.0, cap=30.0)).next()
        delay = max(delay, 0.1)
        log.error("%s stopped; reading it again in %.1fs", task.get_name(), delay, exc_info=error)
        asyncio.get_running_loop().call_later(delay, self._again, shard)

    def _again(self, shard: str) -> None:
        if not self._stopping.is_set() and shard not in self._reading:
            self._read(shard)

    def _alive(self, shard: str, committed: bool) -> None:
        """A restarted shard loop works: nothing was waiting for it, or a frame committed
        (which also ends its backoff: a loop that keeps dying waits longer each time)."""
        self._trouble.discard(dead(shard))
        if committed:
            del self._restarts[shard]

    async def _pause(self, seconds: float) -> bool:
        """Sleep up to `seconds`; False when the batcher is stopping."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return True
        return False

    async def _watch_shards(self) -> None:
        while await self._pause(min(SHARDS_EVERY_S, self.settings.frames.lease_ttl_s / 3)):
            try:
                shards = await self.stream.shards()
                await self._balance(shards)
                await self._follow(shards)
            except NumeratorError as exc:
                log.warning("cannot list the stream's shards or the batchers: %s", exc)

    async def _heartbeat(self) -> None:
        """Say this batcher is alive every ALIVE_EVERY_S, so that an edge's /healthz knows
        within BATCHER_ALIVE_S when no batcher is left (the shares move at their own pace)."""
        while await self._pause(ALIVE_EVERY_S):
            try:
                await self.store.alive(self.stream.name, self.owner)
            except NumeratorError as exc:
                log.debug("cannot say this batcher is alive: %s", exc)

    async def _balance(self, shards: dict[str, tuple[str, ...]]) -> None:
        """Say this batcher is alive, and work out its share of the shards not yet ended."""
        for shard in shards:
            if shard not in self._ended and await self._is_ended(shard):
                self._ended.add(shard)
        open_shards = sum(1 for shard in shards if shard not in self._ended)
        members = await self.store.members(
            self.stream.name, self.owner, self.settings.frames.lease_ttl_s
        )
        share = open_shards // len(members)
        if members.index(self.owner) < open_shards % len(members):
            share += 1
        if share != self._share:
            log.info(
                "%d batcher(s) share %d open shard(s): this one takes %d",
                len(members),
                open_shards,
                share,
            )
        self._share = share
        self.metrics.batchers.set(len(members))

    async def _parents_ended(self, parents: tuple[str, ...]) -> bool:
        """Wait until every parent shard has been read to its end (False if stopping first)."""
        for parent in parents:
            while not await self._is_ended(parent):
                if not await self._pause(1.0):
                    return False
        return True

    async def _is_ended(self, shard: str) -> bool:
        try:
            return await self.store.ended(self.stream.name, shard)
        except Unavailable:
            return False

    async def _run(self, shard: str, parents: tuple[str, ...] = ()) -> None:
        """Hold the shard's lease whenever this batcher's share allows, and read it while held."""
        if not await self._parents_ended(parents):
            return
        while shard not in self._ended and not self._stopping.is_set():
            lease = await self._acquire(shard)
            if lease is None:
                return
            kept = await self._serve(shard, lease)
            if kept is not None:
                await self._release(kept)
            self._held.discard(shard)
            self.metrics.leases.set(len(self._held))

    def _surplus(self, shard: str) -> bool:
        """Whether to give the shard up, to a batcher with fewer than its share. Decided and
        counted at once (no await between), so that shard loops never give up too many."""
        if len(self._held) <= self._share or self._stopping.is_set():
            return False
        self._held.discard(shard)
        log.info(
            "giving shard %s up: %d held, a share of %d", shard, len(self._held) + 1, self._share
        )
        return True

    async def _serve(self, shard: str, lease: Lease | None) -> Lease | None:
        """Read and apply the shard until stopping, or its share goes to another batcher: the
        lease to release then; None when there is none (the shard ended, or was taken over)."""
        renewed = time.monotonic()
        limit = self.settings.frames.frame_max_records
        failed = Backoff(base=0.05, cap=1.0)  # the pause after a failed read grows while they do
        began = ended = 0.0  # monotonic times the last frame's transaction began and ended
        while lease is not None:
            if self._surplus(shard):
                break
            stopping = self._stopping.is_set()
            entries = await self._records(lease, limit, stopping, failed)
            if entries is None:
                return None
            if time.monotonic() - renewed > self.settings.frames.lease_ttl_s / 3:
                renewed = time.monotonic()
                if (lease := await self._renew(lease)) is None:
                    return None
            if not entries:
                if stopping:
                    break
                if shard in self._restarts:
                    self._alive(shard, committed=False)
                continue
            frame = Frame(entries)
            if len(frame) < limit and not stopping:
                await self._collect(shard, frame, limit, began, ended)
            began = time.monotonic()
            lease = await self._apply(frame, lease)
            ended = time.monotonic()
            if shard in self._restarts and frame.state is not State.OPEN:
                self._alive(shard, committed=True)
        return lease

    async def _records(
        self, lease: Lease, limit: int, stopping: bool, failed: Backoff
    ) -> list[Entry] | None:
        """The shard's next records: none when it cannot be read now (after a pause that grows
        while it cannot); None when it is read to its end."""
        shard = lease.shard
        try:
            entries = await self.stream.read(shard, lease.sequence, limit, 0 if stopping else 0.1)
        except ShardEnded:
            await self._end(lease)
            return None
        except Unavailable as exc:
            log.warning("cannot read shard %s: %s", shard, exc)
            self._trouble.add(f"read {shard}")
            await asyncio.sleep(failed.next() + 0.1)
            return []
        self._trouble.discard(f"read {shard}")
        failed.reset()
        return list(entries)

    async def _collect(
        self, shard: str, frame: Frame, limit: int, began: float, ended: float
    ) -> None:
        """Hold the frame open as long as the frame policy says (`collect_for`), then read in
        what came meanwhile. The frame opened when its oldest record was put, not when it was
        read: records that waited out the previous commit do not wait a whole frame more."""
        frames = self.settings.frames
        spacing = 1 / frames.max_frames_per_s if frames.max_frames_per_s else 0.0
        now = time.monotonic()
        delay = collect_for(
            frames.frame_policy,
            frames.back_frame_ms / 1000,
            time.time() - frame.opened(default=time.time()),
            now - ended,
            frames.frame_min_ms / 1000,
            spacing,
            now - began,
        )
        if delay > 0:
            await asyncio.sleep(delay)
            with contextlib.suppress(ShardEnded, Unavailable):  # the next read says so
                more = await self.stream.read(shard, frame.last_sequence, limit - len(frame), 0)
                frame.add(more)

    async def _end(self, lease: Lease) -> None:
        """The shard is closed and read to its end: say so, so that its children are read."""
        try:
            await self.store.published(self._published.pop(lease.shard, []))
            await self.store.end(lease)
            self._ended.add(lease.shard)
            log.info("shard %s is read to its end", lease.shard)
        except NumeratorError as exc:
            log.warning("cannot mark shard %s as ended: %s", lease.shard, exc)

    async def _acquire(self, shard: str) -> Lease | None:
        """Wait until this batcher's share has room and the shard's lease is free or expired,
        and take it; None when stopping first."""
        backoff = Backoff(cap=1.0)
        while not self._stopping.is_set():
            if len(self._held) < self._share:
                self._held.add(shard)  # counted before the await: no other loop takes its room
                try:
                    lease = await self.store.acquire(
                        self.stream.name, shard, self.owner, self.settings.frames.lease_ttl_s
                    )
                    if lease is not None:
                        if self.stream.durable:
                            await self._republish(lease)
                        self._took(lease)
                        return lease
                    log.debug("shard %s is held by another batcher; waiting", shard)
                except Unavailable as exc:
                    log.warning("cannot take the lease of shard %s: %s", shard, exc)
                self._held.discard(shard)
            await self._pause(backoff.next())
        return None

    def _took(self, lease: Lease) -> None:
        before = self._epochs.get(lease.shard)
        if lease.epoch > 1 and before != lease.epoch:
            self.metrics.takeovers.inc()
            log.info("took shard %s over (epoch %d)", lease.shard, lease.epoch)
        self._epochs[lease.shard] = lease.epoch
        self.metrics.leases.set(len(self._held))

    async def _renew(self, lease: Lease) -> Lease | None:
        """Extend the lease (None when another batcher has taken it); and, since a quiet shard
        has no next frame to do it, mark the replies published since the last frame as such, so
        that a later owner does not send them again."""
        try:
            await self.store.published(self._published.pop(lease.shard, []))
            renewed = await self.store.acquire(
                lease.stream, lease.shard, self.owner, self.settings.frames.lease_ttl_s
            )
        except Unavailable as exc:
            log.warning("cannot renew the lease of shard %s: %s", lease.shard, exc)
            return lease
        if renewed is None or renewed.epoch != lease.epoch:  # taken over: fenced from now on
            log.error("lost the lease of shard %s to another batcher", lease.shard)
            return None
        return lease

    async def _republish(self, lease: Lease) -> None:
        """Publish the replies a crash left held: frames committed but not known published."""
        held = await self.store.unpublished(lease.stream, lease.shard)
        for _, raw in held:
            replies = decode_replies(raw)
            await self.replies.publish(replies)
            self.metrics.republished.inc(len(replies))
        if held:
            log.warning("published again the replies of %d committed frame(s)", len(held))
            await self.store.published([number for number, _ in held])

    async def _release(self, lease: Lease) -> None:
        """Give the shard up: a durable stream's lease expires now and keeps its checkpoint, for
        the next owner; a memory stream's shard dies with this process, so its row goes."""
        try:
            await self.store.published(self._published.pop(lease.shard, []))
            await self.store.release(lease, forget=not self.stream.durable)
        except NumeratorError as exc:
            log.warning("cannot release shard %s: %s", lease.shard, exc)

    async def _apply(self, frame: Frame, lease: Lease) -> Lease | None:
        """Apply the frame until it commits, then publish. Retries only what is retryable."""
        metrics = self.metrics
        metrics.records_in.inc(len(frame))
        metrics.frame_size.observe(len(frame))
        now = time.time()
        behind = self.stream.lag(lease.shard)
        metrics.lag.set(max(0.0, now - frame.opened(default=now)) if behind is None else behind)
        backoff: Backoff | None = None
        while True:
            began = time.monotonic()
            try:
                if backoff is not None and await self._lost(frame, lease):
                    return self._past(frame, lease)
                outcome = await self._commit(frame, lease)
                break
            except LeaseLost as exc:
                log.error("%s; dropping the frame to its new owner", exc)
                return None
            except (Unavailable, StoreError) as exc:
                self._trouble.add("frames")
                metrics.frame_retries.inc()
                backoff = backoff or Backoff()
                delay = backoff.next()
                log.warning(
                    "frame of %d records not applied (%s); retry in %.2fs", len(frame), exc, delay
                )
                await self._give_up_on(frame, time.time() + delay + 0.25, str(exc))
                if not len(frame):
                    return lease
                await asyncio.sleep(delay)
        self._trouble.discard("frames")
        metrics.frame_seconds.observe(time.monotonic() - began)
        if outcome.allocated:
            metrics.frames_committed.inc()
            metrics.values_allocated.inc(outcome.allocated)
        metrics.dead_letters.inc(outcome.dead_letters)
        metrics.replays.inc(outcome.replays)
        metrics.expired.inc(outcome.expired)
        metrics.cancelled.inc(outcome.cancelled)
        metrics.voided.inc(outcome.abandoned)
        self._remember(outcome.taken)
        for _, (name, period, _, last) in outcome.taken:
            if last > self._floors.get((name, period), last - 1):
                self._floors[(name, period)] = last
        frame.applied(outcome.replies)
        durable = self.stream.durable
        applied = max(lease.applied or 0, int(frame.last_sequence)) if durable else None
        lease = Lease(
            lease.stream, lease.shard, lease.owner, lease.epoch, frame.last_sequence, applied
        )
        self._published.pop(lease.shard, None)  # marked in this frame's transaction
        if PAUSE_BEFORE_PUBLISH_S:
            log.warning(
                "fault: frame committed on shard %s, pausing %gs before publishing",
                lease.shard,
                PAUSE_BEFORE_PUBLISH_S,
            )
            await asyncio.sleep(PAUSE_BEFORE_PUBLISH_S)
        if await self._publish(frame) and outcome.held is not None:
            self._published.setdefault(lease.shard, []).append(outcome.held)
        return lease

    async def _lost(self, frame: Frame, lease: Lease) -> bool:
        """Whether a try of `frame` that failed had in fact committed (Postgres went away as it
        committed, and its answer with it); if so, make it whole. On a durable stream its
        replies were held in its transaction: published now. Else no one has its values: they
        become void, abandoned (on this shard's own stream), and its records are answered
        'unavailable', for their clients to ask again — a second try would allocate again and
        leave the first values issued to no one."""
        ranges = await self.store.committed(lease, frame.last_sequence)
        if ranges is None:
            return False
        log.warning(
            "the frame up to %s committed as Postgres went away; %s",
            frame.last_sequence,
            "publishing its held replies" if self.stream.durable else "voiding its values",
        )
        if self.stream.durable:
            await self._republish(lease)
            return True
        voids: list[Demand] = [
            Void(reply_key(), name, first, last, ABANDONED, period, "")
            for name, period, first, last in ranges
        ]
        # A keyed record's claim holds its values for retries: its cancel frees it.
        frees = [
            Cancel(e.record.key, e.record.counter, e.record.idempotency_key, "")
            for e in frame.entries
            if isinstance(e.record, Record) and e.record.idempotency_key is not None
        ]
        await self.stream.put([*voids, *frees])
        problem = "the frame's commit was cut off by a Postgres outage; ask again"
        await self._give_up_on(frame, math.inf, problem)
        return True

    def _past(self, frame: Frame, lease: Lease) -> Lease:
        """The lease once `frame`, committed by a try whose answer was lost, is behind it."""
        applied = max(lease.applied or 0, int(frame.last_sequence)) if self.stream.durable else None
        return Lease(
            lease.stream, lease.shard, lease.owner, lease.epoch, frame.last_sequence, applied
        )

    async def _give_up_on(self, frame: Frame, cutoff: float, problem: str) -> None:
        """Answer 'unavailable' now to the records whose clients will have stopped waiting before
        the next try, and take them out of the frame: they allocate nothing. On a durable stream
        a replay finds them expired, so they never allocate later either."""
        doomed = frame.drop(cutoff)
        if not doomed:
            return
        try:
            await self.replies.publish(
                [
                    Reply(r.key, r.counter, error=ReplyError.UNAVAILABLE, detail=problem)
                    for r in doomed
                ]
            )
        except NumeratorError as exc:  # their edges answer 504 and cancel: nothing allocated
            log.warning("could not answer %d records 'unavailable': %s", len(doomed), exc)
            return
        self.metrics.records_out.inc(len(doomed))

    async def _commit(self, frame: Frame, lease: Lease) -> Outcome:
        durable = self.stream.durable
        earlier: dict[str, Reply] = {}
        if durable and lease.applied is not None and int(frame.first_sequence) <= lease.applied:
            for raw in await self.store.replayed(
                lease.stream, lease.shard, frame.first_sequence, frame.last_sequence
            ):
                earlier.update((reply.key, reply) for reply in decode_replies(raw))
        names = {e.record.counter for e in frame.entries if e.record is not None}
        if time.monotonic() - self._counters_read > COUNTERS_FRESH_S:
            self.counters.clear()  # a counter's retention may have changed
            self._floored.clear()  # and its floor is read again (a new period may have begun)
            self._counters_read = time.monotonic()
        missing = [n for n in names if n not in self.counters]
        if missing:
            self.counters.update(await self.store.get_many(missing))
        await self._floor([n for n in names if n not in self._floored])
        recent: Mapping[str, tuple[str, str, int, int]] = self._recent
        if durable:  # a cancel of a record the shard's previous owner applied
            unknown = {
                e.record.key
                for e in frame.entries
                if isinstance(e.record, Cancel) and e.record.key not in self._recent
            }
            if unknown:
                recent = {**self._recent, **await self._taken_before(lease, unknown)}
        basis = Basis(
            self.counters,
            lease,
            self.clock(),
            time.time(),
            self.settings.retention.idempotency_retention_s,
            keep=self.settings.retention.audit_retention_s,
            hold=durable,
            published=self._published.get(lease.shard, ()),
            earlier=earlier,
            recent=recent,
            floors=self._floors,
        )
        return await apply(frame.entries, self.store, basis)

    async def _floor(self, names: list[str]) -> None:
        """Read the highest value the audit trail holds for the current period of each of
        `names`: a batcher never hands out a value at or below it, whatever `counter_values`
        says (moved back by hand, it would hand them out again)."""
        now = self.clock()
        pairs = sorted((n, self.counters[n].period(now)) for n in names if n in self.counters)
        if not pairs:
            return
        for pair, top in (await self.store.highest(pairs)).items():
            if top > self._floors.get(pair, top - 1):
                self._floors[pair] = top
        self._floored.update(names)

    async def _taken_before(
        self, lease: Lease, keys: set[str]
    ) -> dict[str, tuple[str, str, int, int]]:
        """What records of `keys` took, from the replies the shard's frames kept lately: for
        the cancels of records applied by the shard's previous owner, which died since."""
        found: dict[str, tuple[str, str, int, int]] = {}
        within = self.settings.edge.reply_timeout_s + CANCEL_MARGIN_S
        for raw in await self.store.held_since(lease.stream, lease.shard, within):
            for reply in decode_replies(raw):
                counter = self.counters.get(reply.counter)
                if reply.key in keys and reply.ok and reply.day and counter is not None:
                    period = counter.reset.period(reply.day)
                    found[reply.key] = (reply.counter, period, reply.first, reply.last)
        return found

    def _remember(self, taken: list[tuple[str, tuple[str, str, int, int]]]) -> None:
        """Keep what each record took for as long as its edge may still give up on it (its
        reply timeout, and a margin for the cancel to travel): a cancel voids it."""
        now = time.monotonic()
        if taken:
            self._recent.update(taken)
            self._recent_since.append((now, taken))
        cutoff = now - self.settings.edge.reply_timeout_s - CANCEL_MARGIN_S
        while self._recent_since and self._recent_since[0][0] < cutoff:
            for key, _ in self._recent_since.popleft()[1]:
                self._recent.pop(key, None)

    async def _publish(self, frame: Frame) -> bool:
        """Publish the frame's replies; False if they could not be (a durable stream's next
        owner of the shard publishes them again from what was held)."""
        async for _ in Retries(5):
            try:
                await self.replies.publish(frame.replies)
                break
            except Unavailable as exc:
                log.warning("replies not published (%s); retrying", exc)
            except AwsRefused as exc:  # tried again, it is refused again
                log.error("%d replies not published: %s", len(frame.replies), exc)
                return False
        else:
            log.error("dropped %d replies after 5 tries", len(frame.replies))
            return False
        self.metrics.records_out.inc(len(frame.replies))
        frame.published()
        return True

    async def _sweep(self) -> None:
        """Void, not-confirmed, the values of counters that take confirmations which were not
        confirmed within CONFIRM_TTL_S: as void records on the stream, which the frames check
        again (a value confirmed meanwhile is not voided). Every batcher sweeps; the same void
        twice is made once."""
        every = min(60.0, max(0.5, self.settings.retention.confirm_ttl_s / 4))
        while await self._pause(every):
            try:
                for counter in await self.store.confirming():
                    ttl = self.settings.retention.confirm_ttl_s
                    spans, upto = await self.store.unconfirmed(counter, ttl)
                    voids = not_confirmed(counter.name, spans)
                    if voids:
                        await self.stream.put(voids)
                        log.info("%s: %d span(s) not confirmed in time", counter.name, len(voids))
                    await self.store.swept(counter.name, upto)
            except NumeratorError as exc:
                log.warning("cannot sweep unconfirmed values: %s", exc)

    async def _trail(self) -> None:
        """Chain the ends of edges that ended or died (the report reads them from the chain),
        and keep the chains' heads outside Postgres every ANCHOR_EVERY_S (when ANCHOR_TO names
        where): from then on a rewrite of the trail before those heads shows."""
        every = self.settings.retention.anchor_every_s
        due = 0.0
        while await self._pause(MARK_EVERY_S):
            try:
                keep = self.settings.retention.audit_retention_s
                await self.store.mark_edges(self.stream.name, MARK_DEAD_S, keep)
            except NumeratorError as exc:
                log.warning("cannot chain the ends of edges: %s", exc)
            if self.anchors is None or time.monotonic() < due:
                continue
            try:
                await self.anchor()
                due = time.monotonic() + every
            except NumeratorError as exc:
                log.warning("cannot keep the audit heads in %r: %s", self.anchors, exc)

    async def anchor(self) -> dict[str, Any]:
        """Keep the chains' heads in the anchor sink now; the record kept."""
        assert self.anchors is not None
        heads = await self.store.heads()
        record = {"at": utc_now().isoformat(), "by": self.owner, "heads": heads}
        await self.anchors.keep(record)
        return record

    async def _prune(self) -> None:
        while await self._pause(PRUNE_EVERY_S):
            try:
                await self.store.prune(
                    utc_now(),
                    self.settings.retention.audit_retention_s,
                    self.settings.retention.reply_ttl_s,
                )
            except NumeratorError as exc:
                log.warning("cannot prune expired keys and old audit rows: %s", exc)
