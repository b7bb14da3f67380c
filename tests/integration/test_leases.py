"""A batcher's lease asked on a connection of its own (`alone`): the answer it needs when its
pool has no connection to give (made again after an outage, later than another batcher's pool)
before it gives records up (batcher/applier.py `_still_ours`)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from infra.adapters.postgres import PostgresStore
from infra.errors import StoreUnavailable


async def test_a_lease_is_asked_alone_when_the_pool_has_no_connection_to_give(
    database_url: str,
) -> None:
    store = PostgresStore(database_url, max_size=1, timeout=0.3)
    await store.open()
    stream, shard = f"s-{uuid.uuid4().hex[:8]}", "shard-0"
    try:
        mine = await store.acquire(stream, shard, "me", 30.0)
        assert mine is not None
        taken = await store.acquire(stream, shard, "other", 30.0)
        assert taken is None, "held by me"
        async with store.db.connection() as held:  # the pool's one connection, busy
            assert held is not None
            with pytest.raises(StoreUnavailable):
                await store.acquire(stream, shard, "me", 30.0)
            alone = await asyncio.wait_for(store.acquire(stream, shard, "me", 30.0, alone=True), 10)
        assert alone is not None and alone.epoch == mine.epoch
    finally:
        await store.close()


async def test_a_lease_asked_alone_where_postgres_is_not_is_unavailable() -> None:
    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none", max_size=1, timeout=0.3)
    with pytest.raises(StoreUnavailable):
        await store.acquire("s", "shard-0", "me", 30.0, alone=True)
