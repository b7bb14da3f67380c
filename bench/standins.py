"""What /next on one hot counter owes to its frame's statement: the service served at once with
the statement and with stand-ins for it, driven by wrk in alternating rounds.

    python -m bench.standins --rounds 6 --connections 64 --duration 5

Each server is numerator's own (one worker, the embedded mode, one throwaway Postgres for all);
in each but `statement` a plain frame's ONE statement (infra/adapters/postgres/frame.sql: `plain`)
is replaced, in that server's processes only, by a stand-in that keeps the counter's totals in
the process:

- `none`: no Postgres at all (the frame still awaits once, as a statement would);
- `trip`: a round trip, `SELECT 1` on a connection of the frame's pool;
- `row`: one row's UPDATE, committed and flushed: the counter's addition without the fence, the
  floor, the audit row or the JSON they take;
- `unaudited`: the real statement without its audit row (the fence, the floor and the addition);
- `statement`: the real statement; `unflushed`: the real one with `synchronous_commit` off (no
  wait for the commit's WAL flush, which the service never does).

Each round drives `/next` then `/ping` on every server in turn (the order turning each round)
and prints /next's rate as a share of /ping's; then, per server, the median and range. A
stand-in hands out values no ledger holds: it measures, it serves no one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from bench import local, wrk
from infra.ports import PlainDemand

KINDS = ("none", "trip", "row", "unaudited", "statement", "unflushed")
ENVIRONMENT = {"unflushed": {"PGOPTIONS": "-c synchronous_commit=off"}}
ROW = "bench_standin_row"


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", default="64", help="open connections, comma-separated")
    parser.add_argument("--duration", type=float, default=5, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=6, help="rounds; medians are shown")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help=f"the servers, of {', '.join(KINDS)}"
    )
    return parser


def main() -> None:
    args = parser().parse_args()
    kinds = args.kinds.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise SystemExit(f"no such stand-in: {', '.join(unknown)} (of {', '.join(KINDS)})")
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed: apt-get install wrk")
    connections = [int(c) for c in args.connections.split(",")]
    with local.database() as db, ExitStack() as stack:
        served = {
            kind: stack.enter_context(
                local.serve(f"standin-{kind}", db, 1, ENVIRONMENT.get(kind, {}))
            )
            for kind in kinds
        }
        for kind, target in served.items():
            local.create_counters(target.url, [f"hot-{kind}"])
            wrk.run(f"{target.url}/counters/hot-{kind}/next", 64, 2, args.threads)  # warm up
        print(
            f"one worker each, one Postgres; wrk -t{args.threads}, {args.duration:g}s each, "
            "POST, loopback; /next on one hot counter as a share of /ping"
        )
        print(f"{'round':>5} {'conns':>6} " + " ".join(f"{kind:>10}" for kind in kinds))
        shares: dict[tuple[str, int], list[float]] = {}
        for round_ in range(1, args.rounds + 1):
            for c in connections:
                order = kinds if round_ % 2 else kinds[::-1]
                for kind in order:
                    url, seconds = served[kind].url, args.duration
                    rate = wrk.run(f"{url}/counters/hot-{kind}/next", c, seconds, args.threads)
                    ping = wrk.run(url + "/ping", c, seconds, args.threads)
                    shares.setdefault((kind, c), []).append(rate / ping)
                line = " ".join(f"{shares[kind, c][-1]:>10.3f}" for kind in kinds)
                print(f"{round_:>5} {c:>6} {line}", flush=True)
    for c in connections:
        for kind in kinds:
            found = sorted(shares[kind, c])
            print(
                f"{c:>6} {kind:>10}: next/ping median {statistics.median(found):.3f}, "
                f"range {found[0]:.2f}-{found[-1]:.2f}"
            )


def stand_in(kind: str) -> None:
    """Replace a plain frame's statement by the stand-in `kind` in this process (and the workers
    it forks): bench.local starts each server so, numerator run as a program (as `python -m
    numerator` runs it) in a process the stand-in was put in first."""
    if kind not in KINDS:
        raise SystemExit(f"no such stand-in: {kind}")
    if kind == "unaudited":
        from bench.statement import PARTS
        from infra.adapters.postgres import statements

        statements.PLAIN = PARTS["unaudited"]  # read by allocate_plain at each call
    if kind in ("none", "trip", "row"):
        replace(kind)


def replace(kind: str) -> None:
    """`none`, `trip` or `row` in place of PostgresFrames.allocate_plain, the counter's totals
    kept in the process."""
    from infra.adapters.postgres.frames import PostgresFrames

    totals: dict[tuple[str, str], int] = {}
    made: list[bool] = []

    async def allocate_plain(
        self: PostgresFrames,
        lease: Any,
        sequence: str,
        demand: Sequence[PlainDemand],
        audits: Any,
    ) -> dict[tuple[str, str], int]:
        if kind == "none":
            await asyncio.sleep(0)
        else:
            async with self.db.connection(1.0) as conn:
                if kind == "trip":
                    await (await conn.execute("SELECT 1")).fetchall()
                else:
                    if not made:
                        await conn.execute(
                            f"CREATE TABLE IF NOT EXISTS {ROW} (pid int PRIMARY KEY, n bigint)"
                        )
                        await conn.execute(
                            f"INSERT INTO {ROW} VALUES (%s, 0) ON CONFLICT DO NOTHING",
                            (os.getpid(),),
                        )
                        made.append(True)
                    found = await conn.execute(
                        f"UPDATE {ROW} SET n = n + %s WHERE pid = %s RETURNING n",
                        (sum(row.delta for row in demand), os.getpid()),
                    )
                    await found.fetchall()
        for row in demand:
            totals[row.counter, row.period] = totals.get((row.counter, row.period), 0) + row.delta
        return {pair: totals[pair] for pair in {(row.counter, row.period) for row in demand}}

    PostgresFrames.allocate_plain = allocate_plain  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
