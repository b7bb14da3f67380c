"""The worker's garbage-collection pauses and /next's latency under wrk, for this numerator and,
with `--against TREE`, another commit's, in alternating rounds of one run.

    python -m bench.gcpause --rounds 3 --duration 10 --connections 1024 --against /tmp/before

Each numerator (one worker, embedded, on a Postgres of its own) runs with bench/gchook on its
PYTHONPATH: a `gc.callbacks` timer in its processes, which writes every collection's generation,
duration and objects collected to a file of the process's own (the hook is the bench's, never the
product's). Each round drives `POST /counters/hot/next` on each in turn with `wrk --latency` and
prints the rate, p50, p99 and max latency, and the collections that ended within the drive: how
many, the longest, their total, and the objects they collected.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import local

HOOK = str(Path(__file__).parent / "gchook")
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def latency(out: str) -> dict[str, float]:
    """wrk --latency's rate and p50, p99 (ms) and max."""
    found = {p: re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M) for p in ("50", "99")}
    top = re.search(r"Latency\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rate is None or top is None or None in found.values():
        raise SystemExit(f"cannot read wrk's output:\n{out}")
    figures = {f"p{p}": float(m.group(1)) * UNITS[m.group(2)] for p, m in found.items() if m}
    return {
        "rps": float(rate.group(1)),
        **figures,
        "max": float(top.group(1)) * UNITS[top.group(2)],
    }


def pauses(where: Path, start: float, end: float) -> list[tuple[int, float, int]]:
    """(generation, ms, collected) of the collections that ended between `start` and `end`."""
    found = []
    for file in where.iterdir():
        for line in file.read_text().splitlines():
            at, generation, took, collected = line.split()
            if start <= float(at) <= end:
                found.append((int(generation), float(took) * 1e3, int(collected)))
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--connections", type=int, default=1024)
    parser.add_argument("--against", metavar="TREE", help="also the numerator checked out in TREE")
    args = parser.parse_args(argv)
    trees = {"this": None, **({"before": args.against} if args.against else {})}
    with contextlib.ExitStack() as stack:
        served = {}
        for name, tree in trees.items():
            where = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            db = stack.enter_context(local.database())
            path = os.pathsep.join([*([tree] if tree else []), HOOK, os.getcwd()])
            env = {"GCPAUSE_DIR": str(where), "PYTHONPATH": path}
            target = stack.enter_context(local.serve("numerator", db, 1, env, tree=tree))
            local.create_counters(target.url, ["hot"])
            served[name] = (target, where)
        print(
            f"{'round':>5} {'app':>6} {'rps':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}"
            "  collections (gen: n, longest ms, total ms, collected)"
        )
        for round_ in range(1, args.rounds + 1):
            names = list(served) if round_ % 2 else list(served)[::-1]
            for name in names:
                target, where = served[name]
                command = ["wrk", "-t1", f"-c{args.connections}", f"-d{args.duration:g}s"]
                command += ["--latency", "-s", str(Path(__file__).parent / "post.lua")]
                start = time.time()
                out = subprocess.run(
                    [*command, target.url + "/counters/hot/next"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                end = time.time()
                seen = latency(out)
                found = pauses(where, start, end)
                by = []
                for generation in sorted({g for g, _, _ in found}):
                    mine = [(ms, n) for g, ms, n in found if g == generation]
                    by.append(
                        f"{generation}: {len(mine)}, {max(ms for ms, _ in mine):.1f}, "
                        f"{sum(ms for ms, _ in mine):.1f}, {sum(n for _, n in mine)}"
                    )
                print(
                    f"{round_:>5} {name:>6} {seen['rps']:>8,.0f} {seen['p50']:>7.2f} "
                    f"{seen['p99']:>7.2f} {seen['max']:>7.1f}  {'; '.join(by) or 'none'}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
