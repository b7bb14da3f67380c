"""/next on one hot counter against a trivial route on the same server, driven by wrk.

    python -m bench.wrk_next --connections 64,256,1024 --duration 10

Starts `numerator up --ephemeral` (BACK_FRAME_MS=10 unless set), creates a counter, and for each
concurrency runs wrk on POST /ping (the trivial route) and POST /counters/hot/next in turn, then
prints both rates, their ratio, and requests per Postgres transaction from /metrics.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import httpx

from bench.scrape import scrape

POST = 'wrk.method = "POST"\n'


def wrk(url: str, connections: int, duration: float, threads: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(POST)
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "-s", script.name, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    os.unlink(script.name)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"wrk saw {errors.group(1)} failed responses:\n{out}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert match, out
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", default="64,256,1024")
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--port", type=int, default=8089)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed: apt-get install wrk")
    env = {**os.environ, "BACK_FRAME_MS": os.environ.get("BACK_FRAME_MS", "10")}
    env.pop("DATABASE_URL", None)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "numerator",
            "up",
            "--ephemeral",
            "--port",
            str(args.port),
            "--workers",
            str(args.workers),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(base + "/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        httpx.post(base + "/counters", json={"name": "hot"})
        wrk(base + "/ping", 64, 2, args.threads)  # warm up
        wrk(base + "/counters/hot/next", 64, 2, args.threads)
        print(
            f"BACK_FRAME_MS={env['BACK_FRAME_MS']} workers={args.workers} "
            f"wrk -t{args.threads}, {args.duration:g}s each, POST, loopback"
        )
        print(f"{'conns':>6} {'trivial rps':>12} {'/next rps':>10} {'ratio':>6} {'req/txn':>8}")
        for connections in (int(c) for c in args.connections.split(",")):
            trivial = wrk(base + "/ping", connections, args.duration, args.threads)
            before = scrape(base)
            rate = wrk(base + "/counters/hot/next", connections, args.duration, args.threads)
            after = scrape(base)
            requests = (
                after["numerator_next_requests_total"] - before["numerator_next_requests_total"]
            )
            frames = (
                after["numerator_frames_committed_total"]
                - before["numerator_frames_committed_total"]
            )
            per_txn = requests / frames if frames else float("nan")
            print(
                f"{connections:>6} {trivial:>12,.0f} {rate:>10,.0f} {rate / trivial:>6.2f} "
                f"{per_txn:>8.1f}",
                flush=True,
            )
        if args.workers > 1:
            print("(req/txn is read from whichever worker answered /metrics)")
    finally:
        server.send_signal(2)
        server.wait(30)


if __name__ == "__main__":
    main()
