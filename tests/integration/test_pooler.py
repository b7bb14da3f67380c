"""The store through a real PgBouncer in transaction mode (tests/pgbouncer.py): what a server
session would otherwise carry — the startup options' limits, prepared statements, a LISTEN —
done another way with DATABASE_POOLER=transaction, and said in one sentence without it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import psycopg
import pytest

from infra import keys
from infra.adapters.postgres import PostgresStore, migrate
from infra.adapters.postgres.keys import KEYS_POLL_S
from infra.adapters.postgres.pool import IDLE_IN_TRANSACTION_S, LOCK_TIMEOUT_S, Pool
from infra.clock import utc_now
from infra.counters import Counter
from infra.errors import SettingsError, StoreError
from tests.pgbouncer import pgbouncer

pytestmark = pytest.mark.slow  # PgBouncer may have to be installed first (tests/tools.py)


@pytest.fixture
def pooled_url(fresh_database: str) -> Iterator[str]:
    with pgbouncer(fresh_database) as url:
        yield url


async def test_without_the_setting_the_pooler_is_named_in_one_sentence(pooled_url: str) -> None:
    with pytest.raises(SettingsError, match="set DATABASE_POOLER=transaction") as raised:
        await migrate(pooled_url)
    assert "\n" not in str(raised.value)
    assert await migrate(pooled_url, pooled=True) == []  # fresh_database is migrated already


async def test_each_transaction_sets_the_limits_and_leaves_the_session_clean(
    pooled_url: str,
) -> None:
    pool = Pool(pooled_url, max_size=2, pooled=True)
    try:
        for _ in range(8):  # past psycopg's prepare threshold (5), on sessions taken in turn
            async with pool.connection() as conn, conn.transaction():
                cur = await conn.execute("SELECT current_setting('lock_timeout'), %s::int", (1,))
                inside = await cur.fetchall()
            assert inside == [(f"{LOCK_TIMEOUT_S:g}s", 1)]
            after = await pool.fetch("SELECT current_setting('lock_timeout')", ())
            assert after == [("0",)]  # the server session went back to the pooler as it came
    finally:
        await pool.close()


async def test_key_changes_are_polled_behind_a_pooler(pooled_url: str) -> None:
    store = PostgresStore(pooled_url, max_size=2, pooled=True)
    changes = store.key_changes()
    try:
        await asyncio.wait_for(anext(changes), 5)  # following
        key, _ = keys.new("poll", ["read"], utc_now())
        await store.add_key(key)
        await asyncio.wait_for(anext(changes), KEYS_POLL_S + 5)
        await store.revoke_key("poll")
        await asyncio.wait_for(anext(changes), KEYS_POLL_S + 5)
        quiet = asyncio.ensure_future(anext(changes))
        await asyncio.sleep(KEYS_POLL_S * 2.5)
        assert not quiet.done(), "news of a change that did not happen"
        quiet.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await quiet
    finally:
        await changes.aclose()
        await store.close()


async def test_a_transaction_left_open_through_the_pooler_ends_and_frees_its_rows(
    pooled_url: str,
) -> None:
    """A process stopped inside a frame (SIGSTOP) behind PgBouncer: the idle-in-transaction
    limit its transaction set ends the server session, so its rows are free for the batcher
    that takes over, within the limit rather than never."""
    store = PostgresStore(pooled_url, max_size=2, pooled=True)
    await store.create(Counter("held"))
    try:
        async with store.db.connection() as frozen, frozen.transaction():
            await frozen.execute("SELECT FROM counters WHERE name = 'held' FOR UPDATE")
            began = time.monotonic()
            async with store.db.connection() as other:  # waits behind the lock, then gets it
                update = other.execute("UPDATE counters SET start = start WHERE name = 'held'")
                await asyncio.wait_for(update, IDLE_IN_TRANSACTION_S * 3)
            waited = time.monotonic() - began
            assert waited < IDLE_IN_TRANSACTION_S + LOCK_TIMEOUT_S
            with pytest.raises(psycopg.Error):  # the frozen one's session was ended
                await frozen.execute("SELECT 1")
    except StoreError:
        pass  # leaving the ended transaction: its rollback finds the session gone
    finally:
        await store.close()
    assert waited >= IDLE_IN_TRANSACTION_S - 0.5
