"""`numerator bench selfcheck`: how fast can this machine's generator send? It drives a trivial
local endpoint on a rising open-model schedule and reports the highest rate it held (99 % of a
second's sends answered, at most 1 % late), with its own CPU; where wrk is installed, wrk's
closed-model ceiling of the same endpoint is measured beside it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import httpx

from bench import wrk
from bench.http import HttpPool
from bench.load import Load, Second, drive
from bench.run import Progress
from bench.schedule import Schedule
from infra.run import loop
from infra.run.server import free_port


def held_in(second: Second) -> bool:
    """Whether the engine held the second's rate: 99 % of its sends answered, and at most 1 %
    released late. Not none: on a shared machine one stall of the process (tens of ms) makes a
    few sends late in seconds the engine holds easily, and 'held' would say 3k where it sent 14k."""
    return second.ok >= 0.99 * second.offered and second.missed <= 0.01 * second.offered


def check(max_rps: float, seconds: float, connections: int) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "granian",
            "--interface",
            "asgi",
            "--port",
            str(port),
            "--no-ws",
            "--factory",
            "bench.trivial:factory",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                httpx.get(url + "/", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        schedule = Schedule.parse(f"line(100, {max_rps:g}, {seconds:g}s)")
        load = Load(schedule=schedule, connections=connections, path="/ping")
        progress = Progress("selfcheck", schedule, quiet=False)
        outcome = loop.run(lambda: drive(HttpPool(url, connections), load, progress))
        held = 0
        for _, second in sorted(outcome.per_second.items()):
            if second.offered and held_in(second):
                held = max(held, second.ok)
        lines = [
            f"built-in engine: held {held:,} rps (≥ 99 % answered, ≤ 1 % sent late) "
            f"(schedule {schedule.text}; {outcome.missed} missed sends overall, worst "
            f"{outcome.worst_late_ms:.1f} ms late; generator CPU {outcome.cpu_pct:.0f}% of a core)",
        ]
        if shutil.which("wrk"):
            lines.append(
                f"wrk (closed model, -t1 -c64, 5s): {wrk.run(url + '/ping', 64, 5):,.0f} rps on "
                "the same endpoint"
            )
        else:
            lines.append("wrk not installed (apt-get install wrk) — no closed-model ceiling")
        lines.append(
            "Runs below the built-in figure are measured by the generator, not capped by it."
        )
        return "\n".join(lines)
    finally:
        server.terminate()
        server.wait(10)
