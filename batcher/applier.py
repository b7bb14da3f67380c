"""A frame applied: tried until it commits (retrying only what is retryable), then published.

On a durable stream a frame's replies are also held in its transaction until they are published,
so that whoever owns the shard next publishes what a crash between commit and publish left out."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from batcher.allocation import Basis, Outcome, apply, decode_replies
from batcher.frame import Frame
from batcher.gather import Gather
from batcher.known import Known
from batcher.recent import Recent
from batcher.rewinds import Rewinds
from batcher.shared import Shared
from batcher.shares import Shares
from infra.adapters.beats import reply_lag
from infra.adapters.push import Pusher
from infra.backoff import Backoff, Retries
from infra.errors import (
    AwsRefused,
    LeaseLost,
    NumeratorError,
    ShardEnded,
    StoreError,
    Unavailable,
)
from infra.faults import Faults
from infra.ledger import VoidReason
from infra.observe import traces
from infra.observe.metrics import Metrics
from infra.ports import Claim, Frames, Holder, Lease, Replies, Stream
from infra.settings import ReadBeats, Settings
from infra.spans import Span, outside
from infra.wire import Cancel, Demand, Record, Reply, ReplyError, Void, reply_key

log = logging.getLogger("numerator.batcher")

GIVE_UP_MARGIN_S = 0.5
"""A record is given up (answered 'unavailable') this long before its client stops waiting, at
the least: time to check the lease (LEASE_CHECK_S) and for the reply to reach its edge."""
LEASE_CHECK_S = 0.25
"""How long a batcher that gives records up waits to learn whether its lease is still its own."""


@dataclass(frozen=True, slots=True)
class Committed:
    """A frame's try committed: its outcome."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Emptied:
    """Every record of a frame was given up, none committed: the lease to go on with."""

    lease: Lease


@dataclass(frozen=True, slots=True)
class Dropped:
    """Another batcher took the shard over: the frame is left to it."""


Tried = Committed | Emptied | Dropped
"""How a frame's tries ended (`Applier._commit_retried`)."""


class Applier:
    def __init__(
        self,
        stream: Stream,
        replies: Replies,
        frames: Frames,
        shares: Shares,
        known: Known,
        recent: Recent,
        settings: Settings,
        metrics: Metrics,
        faults: Faults,
        shared: Shared,
        push: Pusher | None = None,
    ) -> None:
        """`push`: pushes committed replies to the edges whose records name an inbox (none
        without push keys)."""
        self.stream, self.replies, self.frames = stream, replies, frames
        self.shares, self.known, self.recent = shares, known, recent
        self.settings, self.metrics, self.faults = settings, metrics, faults
        self.shared = shared
        # On a durable stream (Kinesis) a beat's frames publish together; a stream that counts
        # its reads in flight (Stream.reads) has them waited for as well. Phased beats
        # read the shards one after another: no two frames share a beat.
        together = settings.aws.read_beats is ReadBeats.SHARED
        gather_s = settings.aws.reply_gather_ms / 1000 if stream.durable and together else 0.0
        interval = settings.aws.read_interval_ms / 1000
        self.gather = Gather(replies.publish, gather_s, stream.reads, interval, reply_lag(settings))
        self.push = push or Pusher(None)
        self.rewinds = Rewinds(frames)

    async def apply(self, frame: Frame, lease: Lease, token: object = None) -> Lease | None:
        """Apply the frame until it commits, then publish (with the frames applying beside it:
        `token`, from `self.gather.applying()`): the lease moved past it; None when another
        batcher took the shard over."""
        if self.shares.given_up:  # what this batcher gave up is never allocated after all
            frame.forget(self.shares.given_up)
        self._observe(frame, lease)
        began = time.time()
        with traces.step("commit"):
            ended = await self._commit_retried(frame, lease)
        committed = time.time()
        if isinstance(ended, Dropped):
            return None
        if isinstance(ended, Emptied):
            return ended.lease
        outcome = ended.outcome
        self._count(outcome)
        if outcome.rewound:
            await self.rewinds.found(outcome.rewound)
        self.recent.remember(outcome.taken)
        self.known.taken(one.span for one in outcome.taken)
        frame.applied(outcome.replies)
        self.metrics.pushes_sent.inc(self.push.send(frame.entries, outcome.replies))
        lease = self._past(lease, frame.read_to, frame.last_sequence)
        self.shared.marked(lease.shard)  # marked in this frame's transaction
        if self.faults.pause_before_publish_s:
            log.warning(
                "fault: frame committed on shard %s, pausing %gs before publishing",
                lease.shard,
                self.faults.pause_before_publish_s,
            )
            await asyncio.sleep(self.faults.pause_before_publish_s)
        with traces.step("publish"):
            published = await self._publish(frame, token)
        if self.stream.durable:  # the hops a frame's records take (numerator_hop_seconds)
            hops, records = self.metrics.hop_seconds, len(frame.entries)
            hops.observe("commit", committed - began, records)
            hops.observe("publish", time.time() - committed, records)
        if published and outcome.held is not None:
            self.shared.published(lease.shard, outcome.held)
        return lease

    def _observe(self, frame: Frame, lease: Lease) -> None:
        metrics = self.metrics
        metrics.records_in.inc(len(frame))
        metrics.frame_size_records.observe(len(frame))
        now = time.time()
        behind = self.stream.lag(lease.shard)
        metrics.batcher_lag_seconds.set(
            max(0.0, now - frame.opened(default=now)) if behind is None else behind
        )

    async def _commit_retried(self, frame: Frame, lease: Lease) -> Tried:
        """The frame's outcome once a try commits; or, with no outcome to count, the lease to go
        on with (Emptied: every record given up), or Dropped (the lease lost).
        Between tries the frame takes in what its shard holds behind it (`_take_in`): through
        an outage of minutes every record is answered 'unavailable' before its edge stops
        waiting, and none piles up behind a frame that cannot commit."""
        backoff: Backoff | None = None
        tried: str | None = None  # the checkpoint of the last try that failed
        given_up: list[Demand] = []  # records of that try answered 'unavailable' since
        cancelled: set[str] = set()  # records given up whose cancels are not read back yet
        while True:
            began = time.monotonic()
            try:
                if tried is not None:  # had it in fact committed?
                    cancelled.difference_update(r.key for r in given_up)  # their cancels count
                    lease = await self._lost(frame, lease, tried, given_up)
                    tried, given_up = None, []
                if not len(frame):  # every record given up: none committed
                    return Emptied(self._past(lease, frame.read_to or lease.sequence, None))
                tried = frame.last_sequence
                outcome = await self._commit(frame, lease)
                break
            except LeaseLost as exc:
                log.error("%s; dropping the frame to its new owner", exc)
                return Dropped()
            except (Unavailable, StoreError) as exc:
                self.shared.frames_failing(True)
                self.metrics.frame_retries.inc()
                backoff = backoff or Backoff()
                delay = backoff.next()
                log.warning(
                    "frame of %d records not applied (%s); retry in %.2fs", len(frame), exc, delay
                )
                problem = str(exc)
            # The next try may fail as slowly as this one did (a connection refused at once, or
            # the pool's timeout): a record is given up if its client will have stopped waiting
            # by its end.
            slack = time.monotonic() - began + GIVE_UP_MARGIN_S
            try:
                doomed = await self._give_up_on(frame, lease, time.time() + delay + slack, problem)
                given_up += doomed
                cancelled.update(r.key for r in doomed)
                await self._take_in(frame, lease, delay, slack, problem, cancelled)
            except LeaseLost as exc:
                log.error("%s; dropping the frame to its new owner", exc)
                return Dropped()
        self.shared.frames_failing(False)
        self.metrics.frame_commit_seconds.observe(time.monotonic() - began)
        return Committed(outcome)

    async def _take_in(
        self,
        frame: Frame,
        lease: Lease,
        delay: float,
        slack: float,
        problem: str,
        cancelled: set[str],
    ) -> None:
        """Wait `delay` before the frame's next try, meanwhile reading into it what its shard
        holds behind it (up to FRAME_MAX_RECORDS), each record given up as the frame's are:
        when its client will have stopped waiting `slack` seconds after the wait. The cancels
        of records given up, none of them applied (`cancelled`), are left out: else through an
        outage of minutes the frame would fill with them and take in nothing more."""
        until = time.monotonic() + delay
        limit = self.settings.frames.frame_max_records
        while (left := until - time.monotonic()) > 0 and len(frame) < limit:
            try:
                after = frame.read_to or lease.sequence
                more = await self.stream.read(lease.shard, after, limit - len(frame), left)
            except (ShardEnded, Unavailable):  # the shard loop's next read says so
                break
            if more:
                self.metrics.records_in.inc(len(more))
                frame.add(more)
                frame.forget_cancels(cancelled)
                cutoff = time.time() + max(0.0, until - time.monotonic()) + slack
                doomed = await self._give_up_on(frame, lease, cutoff, problem)
                cancelled.update(r.key for r in doomed)
            behind = self.stream.lag(lease.shard)  # the backlog shows through the outage
            if behind is not None:
                self.metrics.batcher_lag_seconds.set(behind)
        await asyncio.sleep(max(0.0, until - time.monotonic()))

    def _count(self, outcome: Outcome) -> None:
        metrics = self.metrics
        if outcome.allocated:
            metrics.frames_committed.inc()
            metrics.values_allocated.inc(outcome.allocated)
        metrics.dead_letters.inc(outcome.dead_letters)
        metrics.records_replayed.inc(outcome.replays)
        metrics.records_expired.inc(outcome.expired)
        metrics.records_cancelled.inc(outcome.cancelled)
        metrics.values_abandoned.inc(outcome.abandoned)
        metrics.records_rewound.inc(outcome.refused)

    async def _lost(
        self, frame: Frame, lease: Lease, tried: str, given_up: Sequence[Demand]
    ) -> Lease:
        """The lease to go on with once it is known whether the try of `frame` that failed,
        up to `tried`, had in fact committed (Postgres went away as it committed, and its
        answer with it): if so, its records are taken out of the frame and made whole. On a
        durable stream their replies were held in its transaction: published now. Else no one
        has their values: they become void, abandoned (on this shard's own stream; a keyed
        record's through its cancel, as a retry may hold them), and the records are answered
        'unavailable', for their clients to ask again — a second try would allocate again and
        leave the first values issued to no one. The records of that try given up on since
        (`given_up`) were answered 'unavailable': their values go to no one, and are voided,
        abandoned (a cancel each, on this shard's own stream; found in a failover, a primary
        killed as its synchronous standby confirmed the commit). What the frame took in after
        that try is tried on its own."""
        spans = await self.frames.committed(lease, tried)
        if spans is None:
            return lease
        log.warning(
            "the frame up to %s committed as Postgres went away; %s",
            tried,
            "publishing its held replies" if self.stream.durable else "voiding its values",
        )
        through = frame.take_through(tried)
        past = self._past(lease, tried, tried)
        gone = [r for r in given_up if isinstance(r, Record)]
        if self.stream.durable:
            await self.shares.republish(lease, leaving={r.key for r in gone})
            if gone:
                await self.stream.put(
                    [Cancel(r.key, r.counter, r.idempotency_key, "") for r in gone], lease.shard
                )
            return past
        # A keyed record's values are its claim's, kept for retries: a retry taken into this
        # frame, or read by another batcher, may be answered them before these voids are
        # applied. Only its cancel frees them, voided if no retry holds them by then.
        records = [e.record for e in through if isinstance(e.record, Record)]
        keyed = [
            Holder(r.counter, r.idempotency_key, r.key)
            for r in [*gone, *records]
            if r.idempotency_key is not None
        ]
        claimed = self._spans(await self.frames.taken(keyed))
        voids: list[Demand] = [
            Void(reply_key(), name, first, last, VoidReason.ABANDONED, period, "")
            for name, period, first, last in outside(spans, claimed)
        ]
        frees = [Cancel(h.reply, h.counter, h.key, "") for h in keyed]
        await self.stream.put([*voids, *frees])
        problem = "the frame's commit was cut off by a Postgres outage; ask again"
        await self._unavailable(records, problem)
        return past

    def _spans(self, claims: Sequence[Claim]) -> list[Span]:
        """The spans of `claims` (their periods by their counters' resets)."""
        counters = self.known.counters
        return [
            Span(c.counter, counters[c.counter].reset.period(c.day), c.first, c.last)
            for c in claims
            if c.counter in counters
        ]

    def _past(self, lease: Lease, sequence: str | None, committed: str | None) -> Lease:
        """`lease` read on after `sequence`; `committed`: the checkpoint a transaction of it
        wrote (None: none did)."""
        applied = None
        if self.stream.durable:
            applied = lease.applied
            if committed is not None:
                applied = max(applied or 0, int(committed))
        return Lease(lease.stream, lease.shard, lease.owner, lease.epoch, sequence, applied)

    async def _give_up_on(
        self, frame: Frame, lease: Lease, cutoff: float, problem: str
    ) -> list[Demand]:
        """Answer 'unavailable' now to the records whose clients will have stopped waiting before
        the next try, and take them out of the frame: they allocate nothing. On a durable stream
        a replay finds them expired, so they never allocate later either — by this batcher; one
        that took the shard over as Postgres came back would replay them before their deadline
        and allocate them, their clients answered 503: so only while the lease is ours
        (`_still_ours`), else LeaseLost."""
        doomed = frame.drop(cutoff)
        if doomed and self.stream.durable:
            if not await self._still_ours(lease) or self.shares.newer(lease):
                raise LeaseLost(f"shard {lease.shard} has a newer owner than epoch {lease.epoch}")
            # Kept before the cancels go (no await between the check and this): a republish by
            # this batcher's newer loop of the shard leaves their replies out, or a reply with
            # their values, read first, would be answered and then voided by the cancel.
            self.shares.give_up(r.key for r in doomed)
            if not await self._cancel(doomed, lease.shard):
                return doomed
        await self._unavailable(doomed, problem)
        return doomed

    async def _cancel(self, doomed: Sequence[Demand], shard: str) -> bool:
        """Put a cancel of each record given up on its `shard`, before it is answered (on that
        shard whatever its partition key: on phased beats an edge puts a lone record on the
        shard read next, not its counter's): a batcher
        that takes the shard over as Postgres comes back (the lease could not be checked while it
        was away) may replay a record before its deadline and allocate it; the cancel behind it
        makes those values void, abandoned, as its client was answered 503. False when the
        stream refuses the cancels: the records are then left unanswered, for their edges to
        answer 504 and cancel them themselves."""
        records = [r for r in doomed if isinstance(r, Record)]
        if not records:
            return True
        try:
            await self.stream.put(
                [Cancel(r.key, r.counter, r.idempotency_key, _who(r)) for r in records], shard
            )
        except NumeratorError as exc:
            log.warning("could not cancel %d records given up: %s", len(records), exc)
            return False
        self.metrics.records_put.inc(len(records))
        return True

    async def _still_ours(self, lease: Lease) -> bool:
        """Whether no other batcher has taken the shard over: the lease renewed now, through the
        pool within LEASE_CHECK_S or else on a connection of its own; or Postgres cannot be
        reached from here (no batcher takes a shard over while it is away)."""
        shares = self.shares
        try:
            async with asyncio.timeout(LEASE_CHECK_S):
                renewed = await shares.leases.acquire(
                    lease.stream, lease.shard, shares.owner, shares.ttl
                )
        except (TimeoutError, Unavailable, StoreError):
            # The pool may have no connection yet as Postgres comes back, when another
            # batcher's has and takes the shard over: its answer decides (the fault matrix's
            # server-1w-postgres cell: records given up here, allocated there, their clients
            # answered 200 and their values then voided by the cancels put here).
            try:
                renewed = await shares.leases.acquire(
                    lease.stream, lease.shard, shares.owner, shares.ttl, alone=True
                )
            except (Unavailable, StoreError):
                return True  # Postgres is away from here: no batcher takes a shard over
        return renewed is not None and renewed.epoch == lease.epoch

    async def _unavailable(self, doomed: Sequence[Demand], problem: str) -> None:
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
            for raw in await self.frames.replayed(
                lease.stream, lease.shard, frame.first_sequence, frame.last_sequence
            ):
                earlier.update((reply.key, reply) for reply in decode_replies(raw))
        await self.known.learn({e.record.counter for e in frame.entries if e.record is not None})
        recent: Mapping[str, Span] = self.recent.taken
        if durable:  # a cancel of a record the shard's previous owner applied
            cancels = {e.record.key for e in frame.entries if isinstance(e.record, Cancel)}
            recent = await self.recent.with_before(lease, cancels, self.known.counters)
        retention = self.settings.retention
        basis = Basis(
            self.known.counters,
            lease,
            self.known.clock(),
            time.time(),
            retention.idempotency_retention_s,
            keep=retention.audit_retention_s,
            hold=durable,
            published=self.shared.unmarked(lease.shard),
            earlier=earlier,
            recent=recent,
            floors=self.known.floors,
        )
        return await apply(frame.entries, self.frames, basis)

    async def _publish(self, frame: Frame, token: object) -> bool:
        """Publish the frame's replies, the first try with the frames applying beside it
        (batcher/gather.py); False if they could not be (a durable stream's next owner of the
        shard publishes them again from what was held)."""
        gathered = token is not None and self.gather.seconds > 0  # else no task, no wait
        async for _ in Retries(5):
            try:
                if gathered:
                    gathered = False
                    await self.gather.publish(token, frame.replies)
                else:
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


def _who(record: Record) -> str:
    """Who a cancel of `record` names: its caller, or none for a front frame's (several)."""
    return record.who if isinstance(record.who, str) else ""
