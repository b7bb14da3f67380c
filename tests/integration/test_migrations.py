"""Migrations on a database of their own: each applies once, and 004 carries the audit rows
written one per counter into one row per frame without losing a range."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from infra.adapters.postgres import migrate, migrations


@pytest.fixture
async def fresh(database_url: str) -> AsyncIterator[str]:
    name = f"migrations_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(f"CREATE DATABASE {name}")
        try:
            params = conninfo_to_dict(database_url)
            params["dbname"] = name
            yield make_conninfo(**params)  # type: ignore[arg-type]
        finally:
            await conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


async def migrated_below(conn: psycopg.AsyncConnection[Any], version: int) -> None:
    """Apply the migrations before `version` by hand, recording them as `migrate` does: a
    database as an older numerator left it."""
    await conn.execute(
        "CREATE TABLE schema_migrations (version integer PRIMARY KEY,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for found, sql in migrations():
        if found < version:
            await conn.execute(sql.encode())
            await conn.execute("INSERT INTO schema_migrations VALUES (%s)", (found,))


async def test_each_migration_applies_once(fresh: str) -> None:
    assert await migrate(fresh) == [version for version, _ in migrations()]
    assert await migrate(fresh) == []


async def test_004_keeps_every_range_of_the_old_audit_rows(fresh: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh, autocommit=True) as conn:
        await migrated_below(conn, 4)
        old = [  # two frames of one shard, one of another; frames are told apart by commit time
            ("a", "", 1, 5, "s", "0", "10", "2026-11-01 10:00:00+00"),
            ("b", "2026", 1, 2, "s", "0", "10", "2026-11-01 10:00:00+00"),
            ("a", "", 6, 6, "s", "0", "11", "2026-11-01 10:00:01+00"),
            ("a", "", 7, 9, "s", "1", "10", "2026-11-01 10:00:01+00"),
        ]
        for row in old:
            await conn.execute(
                "INSERT INTO allocations (counter, period, first, last, stream, shard, sequence,"
                " committed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                row,
            )
    assert await migrate(fresh) == [v for v, _ in migrations() if v >= 4]
    async with await psycopg.AsyncConnection.connect(fresh) as conn:
        cur = await conn.execute("SELECT count(*) FROM allocation_frames")
        assert (await cur.fetchone()) == (3,)
        cur = await conn.execute(
            "SELECT counter, period, first, last, stream, shard, sequence,"
            " to_char(committed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || '+00'"
            " FROM allocations ORDER BY frame, first"
        )
        assert sorted(await cur.fetchall()) == sorted(old)


async def test_012_chains_the_rows_from_before_the_ledger(fresh: str) -> None:
    """Rows written before the hash chains (no chain, no hash) become a chain per shard, so that
    none is outside every chain; the trail then verifies sound, and chain may never be NULL."""
    from infra.adapters.postgres import PostgresStore

    async with await psycopg.AsyncConnection.connect(fresh, autocommit=True) as conn:
        await migrated_below(conn, 12)
        await conn.execute("INSERT INTO counters VALUES ('a', 1, '{value}', 'never', 'UTC')")
        await conn.execute("INSERT INTO counter_values VALUES ('a', '', 9)")
        for first, last, shard in ((1, 5, "0"), (6, 6, "0"), (7, 9, "1")):
            await conn.execute(
                "INSERT INTO allocation_frames (stream, shard, sequence, ranges, keep_until)"
                " VALUES ('s', %s, '1', %s::json, now() + interval '1 day')",
                (shard, f'[["a", "", {first}, {last}]]'),
            )
    assert await migrate(fresh) == [v for v, _ in migrations() if v >= 12]
    store = PostgresStore(fresh)
    try:
        found = await store.verify(None)
    finally:
        await store.close()
    assert found["ok"], found["breaches"]
    assert sorted(found["heads"]) == ["s/0/legacy", "s/1/legacy"]
    async with await psycopg.AsyncConnection.connect(fresh, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.NotNullViolation):
            await conn.execute("UPDATE allocation_frames SET chain = NULL")


async def test_calls_that_come_together_before_the_secret_is_read_share_one_open_pool(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Lambda container's first calls (a key check and /healthz, say) read DATABASE_SECRET_ARN
    at once: the second to come back replaced the opened pool with one never opened, and every
    call then failed 'pool is not open yet' (found through sam local start-api)."""
    import asyncio

    from infra.adapters import secret
    from infra.adapters.postgres import PostgresStore

    async def slowly(url: str, arn: str) -> str:
        await asyncio.sleep(0.05)
        return database_url

    monkeypatch.setattr(secret, "resolve", slowly)
    store = PostgresStore("", secret="arn:aws:secretsmanager:us-east-1:0:secret:db")
    try:
        await asyncio.gather(store.ping(), store.ping(), store.ping())
        await store.ping()
    finally:
        await store.close()


async def test_014_folds_ledger_content_into_its_caller_with_the_same_bytes(fresh: str) -> None:
    """Declared IMMUTABLE over STABLE functions, ledger_content ran as a call of its own in every
    frame's statement; from 014 the planner inlines it (EXPLAIN VERBOSE names no call), and what
    it returns, so every hash in the chains, is the same before and after."""
    row = (
        "'s', '0', '42', '[[\"a\", \"\", 1, 3]]'::json, '{\"r\": []}'::json,"
        " '2026-12-04 10:00:00.123456+00'::timestamptz, '2026-12-05 10:00:00+00'::timestamptz"
    )
    async with await psycopg.AsyncConnection.connect(fresh, autocommit=True) as conn:
        await migrated_below(conn, 14)
        await conn.execute(f"CREATE TEMP TABLE x (s, h, q, r, d, a, k) AS SELECT {row}")
        call = "SELECT ledger_content(s, h, q, r, d, a, k) FROM x"  # columns: nothing to fold

        async def content() -> tuple[bytes, str]:
            cur = await conn.execute(call)
            made = (await cur.fetchone() or (b"",))[0]
            cur = await conn.execute("EXPLAIN VERBOSE " + call)
            return bytes(made), "\n".join(line for (line,) in await cur.fetchall())

        before, planned_before = await content()
        assert "ledger_content(" in planned_before  # the call the old declaration left
        assert await migrate(fresh) == [v for v, _ in migrations() if v >= 14]
        after, planned_after = await content()
    assert after == before
    assert "ledger_content(" not in planned_after, planned_after
