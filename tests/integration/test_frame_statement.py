"""A plain frame's ONE statement (infra/adapters/postgres/frame.sql: `plain`) as Postgres plans it:
what each frame pays for, checked in the plan rather than timed."""

from __future__ import annotations

import re
import uuid

import psycopg

from infra.adapters.postgres import PostgresStore
from infra.adapters.postgres.frames import plain_parameters
from infra.adapters.postgres.statements import PLAIN
from infra.counters import Counter
from infra.ports import Audit, PlainDemand

KEEP_S = 86_400.0


async def test_a_frame_looks_up_its_chains_head_once(
    store: PostgresStore, database_url: str
) -> None:
    """The audit row names its chain's previous hash twice (its `prev`, and in its `hash`):
    looked up once a row, not once each (an inlined CTE repeated the index scan)."""
    name = f"plan-{uuid.uuid4().hex[:8]}"
    await store.create(Counter(name))
    lease = await store.acquire(f"plan-{uuid.uuid4().hex[:8]}", "s", uuid.uuid4().hex, ttl=60)
    assert lease is not None
    klass = f"{KEEP_S:g}s-never"
    audit = Audit(klass, KEEP_S, {"r": [[name, "", [[3, "127.0.0.1", None, "test"]]]], "v": []}, [])
    demand = [PlainDemand(name, "", 3, 1, klass, 0)]
    for sequence in ("1", "2"):  # a chain with a head to find
        assert await store.allocate_plain(lease, sequence, demand, [audit]) == {
            (name, ""): 3 * int(sequence)
        }
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "EXPLAIN (ANALYZE, VERBOSE) " + PLAIN, plain_parameters(lease, "3", demand, [audit])
        )
        plan = "\n".join(line for (line,) in await cur.fetchall())
    # The head's lookup: a scan of allocation_frames, by whichever index the planner picks (its
    # chain index, or its primary key backward once the table has grown: CI saw both).
    looked_up = [
        line
        for line in plan.splitlines()
        if "Scan" in line and "on public.allocation_frames " in line
    ]
    assert len(looked_up) == 1, plan
    # it ran, and found the head ("rows=1.00" from Postgres 18 on)
    assert re.search(r"rows=1(\.00)? loops=1", looked_up[0]), plan
