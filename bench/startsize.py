"""A worker's start and size: how soon `numerator serve` answers once started, and its memory
after a minute of load.

    python -m bench.startsize [--runs 5] [--rps 1000] [--seconds 60] [--database-url URL]

ready: `numerator serve` (one worker) started afresh `--runs` times on one Postgres (a throwaway
embedded one unless --database-url), timed from its spawn to its first 200 on /healthz and on
`POST /counters/bench-hot/next`, each polled every 5 ms; the medians and the worst are printed.
size: one more started, `numerator bench --url` driving it at `const(RPS, SECONDS)` from another
process, and the memory of its processes (the supervisor that `numerator serve` is, and its
worker; Postgres apart) sampled each second: RSS, and USS (pages of its own, not shared), once
ready, after the load, and the largest. The Lambda edge's cold start is bench/coldstart.py's.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import psutil

from bench.local import create_counters, database
from infra.run.process import stop
from infra.run.server import free_port

COUNTER = "bench-hot"
POLL_S = 0.005


@dataclass(frozen=True)
class ReadyTime:
    healthy_s: float
    next_s: float


@contextmanager
def serving(url: str, port: int, workers: int = 1) -> Iterator[subprocess.Popen[bytes]]:
    command = [sys.executable, "-m", "numerator", "serve", "--database-url", url]
    command += ["--port", str(port), "--workers", str(workers)]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ)
    )
    try:
        yield process
    finally:
        stop(process, signal.SIGINT, 30)


def first_ok(client: httpx.Client, method: str, url: str, began: float, patience: float) -> float:
    """Seconds from `began` to the first 2xx of `method url`, polled every POLL_S."""
    while time.monotonic() - began < patience:
        try:
            if client.request(method, url).is_success:
                return time.monotonic() - began
        except httpx.HTTPError:
            pass
        time.sleep(POLL_S)
    raise SystemExit(f"{method} {url}: no 2xx within {patience:.0f} s")


def start(database_url: str, workers: int) -> ReadyTime:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    began = time.monotonic()
    with serving(database_url, port, workers), httpx.Client(timeout=2) as client:
        healthy = first_ok(client, "GET", base + "/healthz", began, 60)
        answered = first_ok(client, "POST", f"{base}/counters/{COUNTER}/next", began, 60)
    return ReadyTime(healthy, answered)


def memory(root: psutil.Process) -> dict[str, tuple[float, float]]:
    """RSS and USS (its own pages, not shared) in MB of `root`, the `numerator serve` process
    that starts and watches the workers, and of each worker, its child (and of the machine's
    batcher, with two tiers)."""
    found: dict[str, tuple[float, float]] = {}
    workers = 0
    for n, process in enumerate((root, *root.children(recursive=True))):
        try:
            used = process.memory_full_info()
            batcher = "numerator batcher" in " ".join(process.cmdline())
        except psutil.Error:
            continue
        workers += 0 if n == 0 or batcher else 1
        who = "supervisor" if n == 0 else "batcher" if batcher else f"worker {workers}"
        found[who] = (used.rss / 2**20, used.uss / 2**20)
    return found


def shown(found: dict[str, tuple[float, float]]) -> str:
    return ", ".join(f"{who} {rss:.0f} MB RSS ({uss:.0f} own)" for who, (rss, uss) in found.items())


def size(database_url: str, rps: int, seconds: int, workers: int) -> tuple[str, str, str, str]:
    """Memory once ready, after the load, at its largest (RSS, each process), and the bench's
    summary line."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with serving(database_url, port, workers) as process, httpx.Client(timeout=2) as client:
        first_ok(client, "POST", f"{base}/counters/{COUNTER}/next", time.monotonic(), 60)
        root = psutil.Process(process.pid)
        at_start = memory(root)
        largest = dict(at_start)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(1.0):
                for who, used in memory(root).items():
                    largest[who] = max(largest.get(who, used), used)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        load = [sys.executable, "-m", "numerator", "bench", "--url", base, "--quiet"]
        load += ["--schedule", f"const({rps},{seconds}s)", "--counters", "1"]
        ran = subprocess.run(load, capture_output=True, text=True, check=False)
        done.set()
        sampler.join()
        last = memory(root)
    said = [line for line in ran.stdout.splitlines() if line.startswith("numerator ")]
    if ran.returncode != 0 or not said:
        raise SystemExit(f"the load failed ({ran.returncode}): {ran.stderr[-2000:]}")
    return shown(at_start), shown(last), shown(largest), said[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.startsize")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rps", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--no-size", action="store_true", help="the start only")
    parser.add_argument("--workers", type=int, default=1, help="2 or more: two tiers")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with database(args.database_url) as postgres:
        first_counter(postgres.url)
        starts = [start(postgres.url, args.workers) for _ in range(args.runs)]
        healthy = [s.healthy_s * 1000 for s in starts]
        answered = [s.next_s * 1000 for s in starts]
        print(
            f"ready: {args.runs} starts of `numerator serve --workers {args.workers}`: /healthz "
            "200 after "
            f"median {statistics.median(healthy):.0f} ms (worst {max(healthy):.0f}), first /next "
            f"200 after median {statistics.median(answered):.0f} ms (worst {max(answered):.0f}); "
            f"load average {load:.1f} at the start, {os.cpu_count()} CPUs"
        )
        if args.no_size:
            return
        at_start, last, most, said = size(postgres.url, args.rps, args.seconds, args.workers)
        print(
            f"size: once ready, {at_start}\n  after const({args.rps},{args.seconds}s): {last}"
            f"\n  largest: {most}\n  load average {os.getloadavg()[0]:.1f} at the end; the "
            f"load: {said}"
        )


def first_counter(database_url: str) -> None:
    """Create the counter the starts ask for, through a worker of its own."""
    port = free_port()
    with serving(database_url, port), httpx.Client(timeout=2) as client:
        first_ok(client, "GET", f"http://127.0.0.1:{port}/healthz", time.monotonic(), 60)
        create_counters(f"http://127.0.0.1:{port}", [COUNTER])


if __name__ == "__main__":
    main()
