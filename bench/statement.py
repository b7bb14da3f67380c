"""A plain frame's one statement in Postgres, and its parts, timed apart from everything else.

    python -m bench.statement --statements 500 --rounds 3

On a throwaway embedded Postgres: one counter, one lease, and a lone client (psycopg, prepared
statements, autocommit, as the batcher's pool runs them) that sends each statement again and
again, each its own transaction, with `synchronous_commit` on (the service's setting) and off (no
wait for the commit's WAL flush, which the service never does). Prints the time a statement,
the best of `--rounds` rounds: a round trip (`SELECT 1`), the fence alone, the addition to the
counter's row alone, the frame without its audit row (those three in bench/statement.sql), and
the frame as the batcher sends it (infra/adapters/postgres/frame.sql: `plain`). On one hot
counter a frame holds the counter's row from its addition to the end of its commit, and the next
frame waits for it: at 64 connections this time, a frame of about 30 requests, is part of what
/next waits on; the worker's own loop and frame path are the rest (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Callable
from importlib import resources
from typing import Any

import psycopg

from bench import local
from infra.adapters.postgres import PostgresStore
from infra.adapters.postgres.frames import plain_parameters
from infra.adapters.postgres.pool import migrate
from infra.adapters.postgres.statements import PLAIN, fence, load
from infra.counters import Counter
from infra.ports import Audit, Lease, PlainDemand

PARTS = load((resources.files("bench") / "statement.sql").read_text())
COUNTER = "hot"
KEEP_S = 86_400.0
RECORDS = 30  # a frame's records at 64 connections on one hot counter
TRIP, UNAUDITED, FRAME = (
    "a round trip (SELECT 1)",
    "the frame without its audit row",
    "the frame (PLAIN)",
)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--statements", type=int, default=500, help="statements a round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the best is shown")
    parser.add_argument("--warm", type=int, default=2000, help="frames written first")
    return parser


def main() -> None:
    args = parser().parse_args()
    with local.database() as db:
        lease = asyncio.run(prepare(db.url))
        with psycopg.connect(db.url, autocommit=True) as conn:
            made: dict[str, int] = {}
            parts = statements(lease, made)
            frame = parts[FRAME]
            for _ in range(args.warm):  # a chain and a counter row with some history
                conn.execute(*frame(), prepare=True)
            print(
                f"{args.rounds} rounds of {args.statements} statements; ms a statement, the "
                "best round"
            )
            print(f"{'statement':<36} {'sync on':>8} {'sync off':>9}")
            spent: dict[tuple[str, str], float] = {}
            for name, make in parts.items():
                line = f"{name:<36}"
                for sync in ("on", "off"):
                    conn.execute(f"SET synchronous_commit = {sync}")
                    spent[name, sync] = best(conn, make, args.statements, args.rounds)
                    line += f" {spent[name, sync] * 1000:>8.3f}"
                print(line, flush=True)
        check(db.url, lease, made)
    whole = spent[FRAME, "on"]
    print(
        f"the audit row adds {(whole - spent[UNAUDITED, 'on']) * 1000:.3f} ms; the commit's "
        f"flush {(whole - spent[FRAME, 'off']) * 1000:.3f} ms; a round trip is "
        f"{spent[TRIP, 'on'] * 1000:.3f} ms"
    )


async def prepare(url: str) -> Lease:
    """The schema, the counter, and a lease on a shard of a stream of its own."""
    await migrate(url)
    store = PostgresStore(url)
    try:
        await store.create(Counter(COUNTER))
        lease = await store.acquire("bench-statement", "s", uuid.uuid4().hex, ttl=3600)
    finally:
        await store.close()
    if lease is None:
        raise SystemExit("could not take the bench's lease")
    return lease


Statement = Callable[[], tuple[str, Any]]


def statements(lease: Lease, made: dict[str, int]) -> dict[str, Statement]:
    """Each part to time: a function giving its SQL and the parameters of its next run (the
    sequence moves on at every run, as a shard's checkpoint does), counted in `made` by kind:
    'added' (a run that adds RECORDS to the counter), 'audited' (one that writes an audit row)."""
    klass = f"{KEEP_S:g}s-never"
    who = [[COUNTER, "", [[RECORDS, "127.0.0.1", None, "bench"]]]]
    audit = Audit(klass, KEEP_S, {"r": who, "v": []}, [])
    demand = [PlainDemand(COUNTER, "", RECORDS, 1, klass, 0)]
    sequence = iter(range(1, 1 << 62))

    def counted(*kinds: str) -> None:
        for kind in kinds:
            made[kind] = made.get(kind, 0) + 1

    def plain(sql: str, *kinds: str) -> Statement:
        def make() -> tuple[str, Any]:
            counted("added", *kinds)
            return sql, plain_parameters(lease, str(next(sequence)), demand, [audit])

        return make

    def addition() -> tuple[str, Any]:
        counted("added")
        return PARTS["addition"], {
            "counter": COUNTER,
            "delta": RECORDS,
        }

    return {
        TRIP: lambda: ("SELECT 1", None),
        "the fence (the lease's checkpoint)": lambda: (
            PARTS["fence"],
            fence(lease, str(next(sequence))),
        ),
        "the addition (the counter's row)": addition,
        UNAUDITED: plain(PARTS["unaudited"]),
        FRAME: plain(PLAIN, "audited"),
    }


def check(url: str, lease: Lease, made: dict[str, int]) -> None:
    """What was timed did its work: the counter holds every addition, the chain every frame."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT allocated FROM counter_values WHERE counter = %s", (COUNTER,)
        ).fetchone()
        audited = conn.execute(
            "SELECT count(*) FROM allocation_frames WHERE stream = %s", (lease.stream,)
        ).fetchone()
    allocated, rows = (row or (0,))[0], (audited or (0,))[0]
    if allocated != made["added"] * RECORDS or rows != made["audited"]:
        raise SystemExit(
            f"the statements did not all do their work: {allocated} values allocated, "
            f"{made['added'] * RECORDS} expected; {rows} audit rows, {made['audited']} expected"
        )


def best(conn: psycopg.Connection[Any], make: Statement, count: int, rounds: int) -> float:
    """Seconds a statement in the best of `rounds` rounds of `count` statements (each its own
    transaction: the connection is in autocommit)."""
    conn.execute(*make(), prepare=True)
    times = []
    for _ in range(rounds):
        runs = [make() for _ in range(count)]  # parameters made before the clock starts
        began = time.perf_counter()
        for sql, parameters in runs:
            conn.execute(sql, parameters, prepare=True)
        times.append((time.perf_counter() - began) / count)
    return min(times)


if __name__ == "__main__":
    main()
