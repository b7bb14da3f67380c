"""What a batcher republishes when it takes a shard (batcher/shares.py), with fakes for its
ports: never the reply of a record it gave up (a cancel put, answered 'unavailable'), and its
new epoch known before it republishes, so that its older loop of the shard gives nothing up.

Found by the fault matrix's server-1w-postgres cell: as Postgres came back, a batcher's own
lease of a shard had expired and another of its loops took the shard (epoch 2) and republished
a frame the first loop had committed without knowing it; that loop, still retrying, gave the
frame's records up and cancelled them (Postgres could not say the lease was gone): their
clients were answered 200 from the republish, then their values voided."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from batcher.allocation import encode_replies
from batcher.shared import Shared
from batcher.shares import GIVEN_UP, Shares
from batcher.stopping import Stopping
from infra.observe.metrics import Metrics
from infra.ports import HeldReplies, Lease
from infra.wire import Reply


class Stream:
    name, durable = "s", True


class Frames:
    """Holds one committed frame's replies, unpublished; notes what `shares` knew then."""

    def __init__(self, replies: list[Reply]) -> None:
        self.held = [HeldReplies(1, encode_replies(replies))]
        self.shares: Shares | None = None
        self.newer_at_republish: bool | None = None

    async def unpublished(self, stream: str, shard: str) -> list[HeldReplies]:
        assert self.shares is not None
        self.newer_at_republish = self.shares.newer(Lease("s", shard, "me", 1, None))
        return self.held

    async def published(self, ids: Sequence[int]) -> None:
        self.held = []


class Replies:
    def __init__(self) -> None:
        self.published: list[Reply] = []

    async def publish(self, replies: Sequence[Reply]) -> None:
        self.published += replies


class Leases:
    async def acquire(
        self, stream: str, shard: str, owner: str, ttl: float, alone: bool = False
    ) -> Lease:
        return Lease(stream, shard, owner, 2, None)


def ok(key: str, value: int) -> Reply:
    return Reply(key, "c", value, value, day=date(2026, 12, 5))


def shares_of(frames: Frames, replies: Replies) -> Shares:
    fake: Any = Stream()
    shares = Shares(
        fake,
        replies,
        Leases(),
        frames,
        "me",
        30.0,
        Metrics(),
        Stopping(),
        Shared(),  # type: ignore[arg-type]
    )
    frames.shares = shares
    return shares


async def test_a_shard_taken_again_republishes_all_but_the_records_given_up() -> None:
    frames, replies = Frames([ok("kept", 1), ok("gone", 2)]), Replies()
    shares = shares_of(frames, replies)
    shares.give_up(["gone"])  # its loop under epoch 1 cancelled it, answered 'unavailable'
    lease = await shares.acquire("shard-0")
    assert lease is not None and lease.epoch == 2
    assert [r.key for r in replies.published] == ["kept"]
    assert frames.newer_at_republish is True, "epoch 2 known before the republish"
    assert shares.newer(Lease("s", "shard-0", "me", 1, None)), "the epoch-1 loop owns nothing"
    assert not shares.newer(lease)


def test_the_keys_given_up_are_kept_to_a_bound() -> None:
    shares = shares_of(Frames([]), Replies())
    shares.give_up(str(i) for i in range(GIVEN_UP + 10))
    assert (
        len(shares.given_up) == GIVEN_UP and "10" in shares.given_up and "9" not in shares.given_up
    )
