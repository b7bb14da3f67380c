"""/next on one hot counter against a trivial route on the same server, driven by wrk.

    python -m bench.wrk_next --connections 64,256,1024 --duration 10

Starts numerator on a throwaway embedded Postgres (BACK_FRAME_MS=10 unless set), creates a
counter, and for each concurrency runs wrk on POST /ping (the trivial route) and POST
/counters/hot/next in turn, then prints both rates, their ratio, and requests per Postgres
transaction from /metrics.
"""

from __future__ import annotations

import argparse
import os
import shutil

from bench import local, wrk
from bench.collect import totals
from bench.scrape import scrape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", default="64,256,1024")
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed: apt-get install wrk")
    frame_ms = os.environ.get("BACK_FRAME_MS", "10")
    with (
        local.database() as db,
        local.serve("numerator", db, args.workers, {"BACK_FRAME_MS": frame_ms}) as target,
    ):
        base = target.url
        local.create_counters(base, ["hot"])
        wrk.run(base + "/ping", 64, 2, args.threads)  # warm up
        wrk.run(base + "/counters/hot/next", 64, 2, args.threads)
        print(
            f"BACK_FRAME_MS={frame_ms} workers={args.workers} "
            f"wrk -t{args.threads}, {args.duration:g}s each, POST, loopback"
        )
        print(f"{'conns':>6} {'trivial rps':>12} {'/next rps':>10} {'ratio':>6} {'req/txn':>8}")
        for connections in (int(c) for c in args.connections.split(",")):
            trivial = wrk.run(base + "/ping", connections, args.duration, args.threads)
            before = totals(scrape(base))
            rate = wrk.run(base + "/counters/hot/next", connections, args.duration, args.threads)
            after = totals(scrape(base))
            frames = after["transactions"] - before["transactions"]
            per_txn = (after["requests"] - before["requests"]) / frames if frames else float("nan")
            print(
                f"{connections:>6} {trivial:>12,.0f} {rate:>10,.0f} {rate / trivial:>6.2f} "
                f"{per_txn:>8.1f}",
                flush=True,
            )
        if args.workers > 1:
            print("(req/txn is read from whichever worker answered /metrics)")


if __name__ == "__main__":
    main()
