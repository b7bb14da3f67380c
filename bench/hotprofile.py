"""Where a request's CPU goes: py-spy on a worker of numerator (or of the bare app) while wrk
drives it.

    python -m bench.hotprofile --connections 1024 --duration 15 --raw next.txt --svg next.svg
    python -m bench.hotprofile --app bare --connections 1024

Starts a throwaway embedded Postgres and on it `numerator serve` (one worker) or the bare app
(bench/trivial.py), drives `POST /counters/hot/next` (or the bare app) with wrk, and samples the
worker's Python stacks with py-spy (`record --format raw`; it needs root or ptrace rights). Then
it prints, over the samples of the worker's main thread (the event loop's: the Rust I/O threads
have no Python stacks), the top frames by self share (the frame's own time and the native code
it calls, such as granian's `send`) and by inclusive share, and the CPU a request they stand for.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench import local, wrk

WORKER = "_spawn_asgi_lifespan_worker"
"""granian's frame under which a forked worker runs its loop: the stacks are cut there."""
MAIN = "_run_module_as_main"
"""The first frame of a main thread's stack in a process started with `python -m`."""


@dataclass(frozen=True)
class Profile:
    """A worker's main-thread samples: each frame's self and inclusive counts."""

    samples: int
    own: collections.Counter[str]
    within: collections.Counter[str]

    def top(self, counts: collections.Counter[str], n: int) -> list[tuple[str, float]]:
        return [(frame, found / self.samples) for frame, found in counts.most_common(n)]


def parse(raw: str) -> list[tuple[list[str], int]]:
    """py-spy's raw (collapsed) output: each stack, root first, with its line numbers dropped,
    and its count — the main thread's only."""
    rows = []
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack.startswith(MAIN) or not count.isdigit():
            continue
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        cut = max((i for i, frame in enumerate(frames) if WORKER in frame), default=-1)
        rows.append((frames[cut + 1 :] if cut >= 0 else frames, int(count)))
    return rows


def profile(rows: Iterable[tuple[list[str], int]]) -> Profile:
    """Self counts by a stack's last frame (the loop's own, native, time when it is empty) and
    inclusive counts by every frame it holds, each frame once."""
    own: collections.Counter[str] = collections.Counter()
    within: collections.Counter[str] = collections.Counter()
    samples = 0
    for frames, count in rows:
        samples += count
        own[frames[-1] if frames else "(the event loop, native)"] += count
        for frame in set(frames):
            within[frame] += count
    return Profile(samples, own, within)


def report(found: Profile, per_request_us: float, n: int = 25) -> str:
    """The top frames, each share with the µs a request it stands for."""
    lines = [
        f"{found.samples} main-thread samples; about {per_request_us:.1f} µs a request of "
        "main-thread CPU (samples at the rate over the time, over requests answered)"
    ]
    for title, counts in (("self", found.own), ("inclusive", found.within)):
        lines.append(f"--- {title}")
        for frame, share in found.top(counts, n):
            lines.append(f"{100 * share:5.1f}%  {share * per_request_us:5.1f} µs  {frame}")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--app", choices=("next", "bare"), default="next")
    parser.add_argument("--connections", type=int, default=1024)
    parser.add_argument("--duration", type=float, default=15, help="seconds sampled")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples a second")
    parser.add_argument("--top", type=int, default=25, help="frames shown of each kind")
    parser.add_argument("--raw", metavar="FILE", help="keep py-spy's raw stacks here")
    parser.add_argument("--svg", metavar="FILE", help="also record a 5 s flame graph here")
    parser.add_argument(
        "--gil",
        action="store_true",
        help="only samples of a thread holding the GIL: Python running, not a thread waiting "
        "in a system call (py-spy counts one preempted in it, say a send that woke Postgres on "
        "busy cores, as busy)",
    )
    return parser


def sample(url: str, pid: int, args: argparse.Namespace, raw: Path) -> float:
    """Drive `url` with wrk while py-spy samples `pid` into `raw` (and a flame graph into
    args.svg); the rate wrk got over the drive."""
    seconds = args.duration + (5 if args.svg else 0) + 4
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write('wrk.method = "POST"\n')
        script.flush()
        drive = ["wrk", "-t1", f"-c{args.connections}", f"-d{seconds:g}s", "-s", script.name, url]
        load = subprocess.Popen(drive, stdout=subprocess.PIPE, text=True)
        time.sleep(2)
        spy = ["py-spy", "record", "--pid", str(pid), "--nonblocking", *(["--gil"] * args.gil)]
        timing = ["--duration", f"{args.duration:g}", "--rate", str(args.rate)]
        subprocess.run(
            [*spy, *timing, "--format", "raw", "-o", str(raw)], check=True, capture_output=True
        )
        if args.svg:
            subprocess.run(
                [*spy, "--duration", "5", "-o", args.svg], check=True, capture_output=True
            )
        out, _ = load.communicate()
    return wrk.parse(out).rate


def main() -> None:
    args = parser().parse_args()
    for tool, hint in (("wrk", "apt-get install wrk"), ("py-spy", "pip install py-spy")):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed: {hint}")
    path = "/counters/hot/next" if args.app == "next" else "/"
    raw = Path(args.raw) if args.raw else Path(tempfile.mkdtemp()) / "stacks.txt"
    with (
        local.database() as db,
        local.serve("numerator" if args.app == "next" else "bare", db, 1, {}) as target,
    ):
        if args.app == "next":
            local.create_counters(target.url, ["hot"])
        wrk.run(target.url + path, 64, 2)  # warm up
        family = psutil.Process(target.pids[0]).children(recursive=True)
        worker = max(family, key=lambda p: p.cpu_times().user)
        rate = sample(target.url + path, worker.pid, args, raw)
    found = profile(parse(raw.read_text()))
    per_request_us = found.samples / args.rate / (args.duration * rate) * 1e6
    print(
        f"{args.app} at {args.connections} connections: {rate:,.0f} rps over the drive "
        f"(py-spy's sampling slows the worker); worker pid {worker.pid}"
    )
    print(report(found, per_request_us, args.top))
    if args.raw:
        print(f"raw stacks: {args.raw}")
    if args.svg:
        print(f"flame graph: {args.svg}")


if __name__ == "__main__":
    main()
