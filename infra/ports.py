"""The ports: one Protocol per external system. Adapters live beside them, one module each."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol

from infra.counters import Counter
from infra.wire import Record, Reply


@dataclass(slots=True)
class Entry:
    """A record as read from a shard, at its sequence number. `record` is None for a poison
    record, whose raw bytes and problem go to the dead-letter table."""

    shard: str
    sequence: str
    record: Record | None
    raw: bytes = b""
    problem: str = ""
    key: str | None = None


class Stream(Protocol):
    """An ordered, sharded log of records (in memory, or Kinesis)."""

    name: str

    async def put(self, records: Sequence[Record]) -> None:
        """Append records; raise StreamFull when the stream will not take them now."""

    async def shards(self) -> list[str]: ...

    async def read(self, shard: str, after: str | None, limit: int, wait: float) -> list[Entry]:
        """Up to `limit` entries after sequence `after`, waiting up to `wait` seconds for one."""


class Replies(Protocol):
    """Where the batcher leaves answers and the edge awaits them (in memory, or DynamoDB)."""

    def expect(self, key: str) -> None:
        """Called before the record is put, so that a fast reply is never missed."""

    async def publish(self, replies: Sequence[Reply]) -> None: ...

    async def wait(self, key: str, timeout: float) -> Reply:
        """The reply under `key`; raise ReplyTimeout when none comes within `timeout` seconds."""


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to apply one shard's records: `epoch` fences out every earlier owner."""

    stream: str
    shard: str
    owner: str
    epoch: int
    sequence: str | None


@dataclass(frozen=True, slots=True)
class Claim:
    """An idempotency key and the range it was answered with."""

    counter: str
    key: str
    count: int
    first: int
    last: int
    day: date


@dataclass(frozen=True, slots=True)
class DeadLetter:
    stream: str
    shard: str
    sequence: str
    problem: str
    raw: bytes


class FrameTransaction(Protocol):
    """One Postgres transaction applying one frame. Leaving the block commits it."""

    async def claims(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Claim]:
        """Earlier answers for (counter, idempotency key) pairs still within retention."""

    async def allocate(self, deltas: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
        """Add each delta to its (counter, period) row, locking rows in a fixed order; return how
        many values each period has handed out after the addition."""

    async def remember(self, claims: Sequence[Claim], retention: float) -> None: ...

    async def dead_letter(self, letters: Sequence[DeadLetter]) -> None: ...

    async def checkpoint(
        self, lease: Lease, sequence: str, ranges: Sequence[tuple[str, str, int, int]]
    ) -> None:
        """Advance the shard's checkpoint and record the frame's (counter, period, first, last)
        ranges; raise LeaseLost when `lease` is no longer current."""


class Store(Protocol):
    """Counter definitions and state (Postgres)."""

    async def create(self, counter: Counter) -> None:
        """Raise CounterExists when the name is taken."""

    async def get(self, name: str) -> Counter | None: ...

    async def get_many(self, names: Sequence[str]) -> dict[str, Counter]: ...

    async def page(self, after: str | None, limit: int) -> list[Counter]: ...

    async def allocated(self, name: str, period: str) -> int:
        """How many values the counter has handed out in `period`."""

    async def acquire(self, stream: str, shard: str, owner: str, ttl: float) -> Lease | None:
        """Take the shard's lease if it is free or expired (or ours); None when another holds it."""

    async def release(self, lease: Lease, forget: bool) -> None: ...

    def frame(self) -> AbstractAsyncContextManager[FrameTransaction]: ...

    async def prune(self, now: datetime, audit_retention: float) -> int:
        """Drop idempotency keys past their expiry, and allocation rows and dead letters older
        than `audit_retention` seconds; return how many rows went."""

    async def ping(self) -> None: ...
