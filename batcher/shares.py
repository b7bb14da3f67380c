"""A batcher's share of a stream's shards, and the leases it holds on them.

Several batchers share a durable stream's shards: each says it is alive every LEASE_TTL_S / 3 and
holds its share of the open shards (the live batchers in the order they joined, the first ones
taking one more when the shards do not divide evenly: a batcher that joins knows before it claims
that the shards already held are not its own). One that holds more gives the surplus up between two
frames; one that holds fewer takes free or expired leases. A dead batcher's leases expire after
LEASE_TTL_S and the others' shares grow to take them."""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Collection, Iterable

from batcher.allocation import decode_replies
from batcher.shared import Shared
from batcher.stopping import Stopping
from infra.backoff import Backoff
from infra.errors import NumeratorError, Unavailable
from infra.observe.metrics import Metrics
from infra.ports import Frames, Lease, Leases, Replies, Stream

log = logging.getLogger("numerator.batcher")

GIVEN_UP = 50_000  # the records given up whose keys a batcher keeps (`Shares.given_up`)


class Shares:
    def __init__(
        self,
        stream: Stream,
        replies: Replies,
        leases: Leases,
        frames: Frames,
        owner: str,
        ttl: float,
        metrics: Metrics,
        stopping: Stopping,
        shared: Shared,
    ) -> None:
        self.stream, self.replies, self.leases, self.frames = stream, replies, leases, frames
        self.owner, self.ttl, self.metrics, self.stopping = owner, ttl, metrics, stopping
        self.shared = shared  # the held replies published since their shard's last frame
        self.held: set[str] = set()  # shards whose lease this batcher holds (or is taking)
        self.share = math.inf  # how many shards it should hold: all, until it knows the others
        self.ended: set[str] = set()  # shards read to their end, by this batcher or another
        self._epochs: dict[str, int] = {}  # per shard: the lease epoch this batcher last held
        self.given_up: OrderedDict[str, None] = OrderedDict()
        """Reply keys of the latest GIVEN_UP records this batcher gave up (a cancel put, answered
        'unavailable'): a republish leaves their replies out, as `_lost`'s does."""

    async def balance(self, shards: dict[str, tuple[str, ...]]) -> None:
        """Say this batcher is alive, and work out its share of the shards not yet ended."""
        for shard in shards:
            if shard not in self.ended and await self.is_ended(shard):
                self.ended.add(shard)
        open_shards = sum(1 for shard in shards if shard not in self.ended)
        members = await self.leases.members(self.stream.name, self.owner, self.ttl)
        share = open_shards // len(members)
        if members.index(self.owner) < open_shards % len(members):
            share += 1
        if share != self.share:
            log.info(
                "%d batcher(s) share %d open shard(s): this one takes %d",
                len(members),
                open_shards,
                share,
            )
        self.share = share
        self.metrics.batchers.set(len(members))

    async def parents_ended(self, parents: tuple[str, ...]) -> bool:
        """Wait until every parent shard has been read to its end (False if stopping first)."""
        for parent in parents:
            while not await self.is_ended(parent):
                if not await self.stopping.pause(1.0):
                    return False
        return True

    async def is_ended(self, shard: str) -> bool:
        try:
            return await self.leases.ended(self.stream.name, shard)
        except Unavailable:
            return False

    def surplus(self, shard: str) -> bool:
        """Whether to give the shard up, to a batcher with fewer than its share. Decided and
        counted at once (no await between), so that shard loops never give up too many."""
        if len(self.held) <= self.share or self.stopping.is_set():
            return False
        self.held.discard(shard)
        log.info(
            "giving shard %s up: %d held, a share of %d", shard, len(self.held) + 1, self.share
        )
        return True

    def drop(self, shard: str) -> None:
        """The shard's loop no longer holds its lease."""
        self.held.discard(shard)
        self.metrics.leases_held.set(len(self.held))

    async def acquire(self, shard: str) -> Lease | None:
        """Wait until this batcher's share has room and the shard's lease is free or expired,
        and take it; None when stopping first."""
        backoff = Backoff(cap=1.0)
        while not self.stopping.is_set():
            if len(self.held) < self.share:
                self.held.add(shard)  # counted before the await: no other loop takes its room
                try:
                    lease = await self.leases.acquire(self.stream.name, shard, self.owner, self.ttl)
                    if lease is not None:
                        # its epoch known before the republish: a loop of this batcher still
                        # retrying the shard's frame under an older one gives nothing up now
                        self._took(lease)
                        if self.stream.durable:
                            await self.republish(lease)
                        return lease
                    log.debug("shard %s is held by another batcher; waiting", shard)
                except Unavailable as exc:
                    log.warning("cannot take the lease of shard %s: %s", shard, exc)
                self.held.discard(shard)
            await self.stopping.pause(backoff.next())
        return None

    def _took(self, lease: Lease) -> None:
        before = self._epochs.get(lease.shard)
        if lease.epoch > 1 and before != lease.epoch:
            self.metrics.lease_takeovers.inc()
            log.info("took shard %s over (epoch %d)", lease.shard, lease.epoch)
        self._epochs[lease.shard] = lease.epoch
        self.metrics.leases_held.set(len(self.held))

    async def renew(self, lease: Lease) -> Lease | None:
        """Extend the lease (None when another batcher has taken it); and, since a quiet shard
        has no next frame to do it, mark the replies published since the last frame as such, so
        that a later owner does not send them again."""
        try:
            await self.frames.published(self.shared.marked(lease.shard))
            renewed = await self.leases.acquire(lease.stream, lease.shard, self.owner, self.ttl)
        except Unavailable as exc:
            log.warning("cannot renew the lease of shard %s: %s", lease.shard, exc)
            return lease
        if renewed is None or renewed.epoch != lease.epoch:  # taken over: fenced from now on
            log.error("lost the lease of shard %s to another batcher", lease.shard)
            return None
        return lease

    async def republish(self, lease: Lease, leaving: Collection[str] = ()) -> None:
        """Publish the replies a crash left held: frames committed but not known published;
        but not those of the records in `leaving` (their keys), nor of any this batcher gave up
        (`given_up`): answered 'unavailable' as the commit's answer was lost, their values are
        voided — a reply with them, read after the first, would be a value handed out and then
        void. `leaving` (`_lost`'s, the records of the try it found committed) is kept beside
        `given_up`, which holds only the latest GIVEN_UP."""
        held = await self.frames.unpublished(lease.stream, lease.shard)
        given_up = self.given_up
        for one in held:
            replies = [
                r
                for r in decode_replies(one.replies)
                if r.key not in leaving and r.key not in given_up
            ]
            await self.replies.publish(replies)
            self.metrics.replies_republished.inc(len(replies))
        if held:
            log.warning("published again the replies of %d committed frame(s)", len(held))
            await self.frames.published([one.id for one in held])

    def newer(self, lease: Lease) -> bool:
        """Whether this batcher took the lease's shard again since, under a newer epoch (its
        own lease expired in an outage, and another of its loops took the shard): the loop
        that holds `lease` no longer owns the shard."""
        return self._epochs.get(lease.shard, lease.epoch) > lease.epoch

    def give_up(self, keys: Iterable[str]) -> None:
        """Keep the reply keys of records given up (`given_up`), the latest GIVEN_UP."""
        given_up = self.given_up
        for key in keys:
            given_up[key] = None
        while len(given_up) > GIVEN_UP:
            given_up.popitem(last=False)

    async def release(self, lease: Lease) -> None:
        """Give the shard up: a durable stream's lease expires now and keeps its checkpoint, for
        the next owner; a memory stream's shard dies with this process, so its row goes."""
        try:
            await self.frames.published(self.shared.marked(lease.shard))
            await self.leases.release(lease, forget=not self.stream.durable)
        except NumeratorError as exc:
            log.warning("cannot release shard %s: %s", lease.shard, exc)

    async def end(self, lease: Lease) -> None:
        """The shard is closed and read to its end: say so, so that its children are read."""
        try:
            await self.frames.published(self.shared.marked(lease.shard))
            await self.leases.end(lease)
            self.ended.add(lease.shard)
            log.info("shard %s is read to its end", lease.shard)
        except NumeratorError as exc:
            log.warning("cannot mark shard %s as ended: %s", lease.shard, exc)
