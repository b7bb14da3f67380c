"""A pool whose Postgres is away does not keep the callers that stopped waiting for a connection
(infra/adapters/postgres/pool.py `_forget_waiters`): psycopg_pool queues each one until a
connection comes, and an outage of minutes piled them up. No network: the server is a Unix
socket that does not exist, refused at once, as a stopped local Postgres is."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from infra.adapters.postgres.pool import Pool
from infra.errors import StoreUnavailable


async def test_callers_that_gave_up_do_not_pile_up_in_the_pool(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, logger="psycopg.pool")
    pool = Pool(f"postgresql://postgres:@/postgres?host={tmp_path}", timeout=0.01)
    await pool.open()
    failed = 0

    async def calls() -> None:
        nonlocal failed
        for _ in range(50):
            with pytest.raises(StoreUnavailable, match="unavailable"):
                async with pool.connection():
                    pass
            failed += 1

    try:
        await asyncio.gather(*(calls() for _ in range(4)))
        assert failed == 200
        assert len(pool.pool._waiting) <= 4, "timed-out callers are kept in the pool's queue"
    finally:
        await pool.close()
