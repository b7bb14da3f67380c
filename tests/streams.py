"""A durable stream held in a list: the stand-in for Kinesis in batcher tests that need fixed raw
records (poison records among them). It passes the same Stream contract suite as every adapter."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from infra.ports import Entry
from infra.wire import Record, encode


class ListStream:
    durable = True

    def __init__(self, raws: Sequence[bytes] = ()) -> None:
        self.name = f"test-{uuid.uuid4().hex[:8]}"
        self.entries: list[Entry] = []
        for raw in raws:
            self.append(raw)

    def append(self, raw: bytes) -> None:
        self.entries.append(Entry.decode("shard-0", str(len(self.entries) + 1), raw))

    async def put(self, records: Sequence[Record]) -> None:
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
