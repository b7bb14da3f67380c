"""A durable stream held in a list: the stand-in for Kinesis in batcher tests that need fixed raw
records (poison records among them). It passes the same Stream contract suite as every adapter."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any

from infra.ports import Entry, Stream
from infra.wire import Record, encode


class ListStream:
    durable = True
    reads = None

    def __init__(self, raws: Sequence[bytes] = ()) -> None:
        self.name = f"test-{uuid.uuid4().hex[:8]}"
        self.entries: list[Entry] = []
        for raw in raws:
            self.append(raw)

    def append(self, raw: bytes) -> None:
        self.entries.append(Entry.decode("shard-0", str(len(self.entries) + 1), raw))

    async def put(self, records: Sequence[Record], shard: str | None = None) -> None:
        for record in records:
            self.append(encode(record))

    async def shards(self) -> dict[str, tuple[str, ...]]:
        return {"shard-0": ()}

    async def read(self, shard: str, after: str | None, limit: int, wait: float) -> list[Entry]:
        start = int(after or 0)
        found = self.entries[start : start + limit]
        if not found:
            await asyncio.sleep(min(wait, 0.01))
        return found

    def lag(self, shard: str) -> float | None:
        return None


async def read_all(
    stream: Stream, after: str | None = None, expect: int = 1, shard: str | None = None
) -> list[Any]:
    """Read `shard` (the only one, when not named) until `expect` entries came, or 10 s."""
    if shard is None:
        (shard,) = await stream.shards()
    found: list[Any] = []
    deadline = time.monotonic() + 10
    while len(found) < expect and time.monotonic() < deadline:
        position = found[-1].sequence if found else after
        found += await stream.read(shard, position, 1000, 0.2)
    return found
