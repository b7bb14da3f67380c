"""The hot path against Python's HTTP floor: /next on one hot counter and a bare ASGI app on the
same server, measured in one run, in alternating rounds.

    python -m bench.yardstick --rounds 10 --duration 5 --connections 64,1024 --json yardstick.json

Starts one throwaway embedded Postgres, numerator on it (`numerator serve`, one worker, the
service's settings from the environment) and the bare app (bench/trivial.py: `send` 200 and a
JSON body, nothing else) under the same granian with the same server settings
(infra.run.server.serve). Each round drives, at each connection count, the bare app and
`POST /counters/hot/next` in turn with wrk (who goes first alternates), and takes over each drive
the CPU time (user and system, from /proc through psutil) of the driven service's processes and
of Postgres's, divided by the requests wrk saw answered. Then per connection count, /next ÷ bare:
service µs a request, service + Postgres µs a request (the bare app's own, which uses no
Postgres, as the divisor), and rate — each round's ratio, and their median and range.

`--floor` drives a third app: the bare app's `/batched` (bench/trivial.py), a request that waits
for a shared frame closed on the loop's next turn and does nothing else — what any service that
answers from frames pays in Python on this server before it does any work. It prints floor ÷ bare
and /next ÷ floor beside /next ÷ bare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from bench import local, wrk

APPS = ("bare", "next")
PATHS = {
    "bare": "/",
    "next": "/counters/hot/next",
    "before": "/counters/hot/next",
    "floor": "/batched",
}
RATIOS = (
    ("service", "service µs/request"),
    ("total", "service+Postgres µs/request"),
    ("rate", "rate"),
)
FLOOR_TABLES = (
    ("floor_over_bare", "floor (/batched) ÷ bare (--floor)"),
    ("over_floor", "/next ÷ floor (/batched)"),
)


@dataclass(frozen=True)
class Sample:
    """One drive of one app: what wrk saw answered, and the CPU seconds spent meanwhile by the
    app's processes (`service`) and by Postgres's (`postgres`)."""

    round: int
    connections: int
    app: str
    requests: int
    seconds: float
    service: float
    postgres: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def service_us(self) -> float:
        return self.service / self.requests * 1e6

    @property
    def postgres_us(self) -> float:
        return self.postgres / self.requests * 1e6


@dataclass(frozen=True)
class Spread:
    """Figures over rounds: their median and range."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, found: Iterable[float]) -> Spread:
        ordered = sorted(found)
        return cls(statistics.median(ordered), ordered[0], ordered[-1])


def ratios(bare: Sample, next_: Sample) -> dict[str, float]:
    """One round's /next ÷ bare. The bare app takes nothing from Postgres (what Postgres spends
    in its drive is numerator's idle background), so service + Postgres is held against the bare
    app's service alone."""
    return {
        "service": next_.service_us / bare.service_us,
        "total": (next_.service_us + next_.postgres_us) / bare.service_us,
        "rate": next_.rate / bare.rate,
    }


def against(before: Sample, next_: Sample) -> dict[str, float]:
    """One round's /next ÷ the other commit's /next."""
    return {
        "service": next_.service_us / before.service_us,
        "total": (next_.service_us + next_.postgres_us) / (before.service_us + before.postgres_us),
        "rate": next_.rate / before.rate,
    }


def summary(samples: Sequence[Sample]) -> dict[int, dict[str, Any]]:
    """Per connection count: each app's figures and the ratios, each a Spread over rounds (with
    `--against`, also /next ÷ the other commit's)."""
    paired: dict[int, dict[int, dict[str, Sample]]] = {}
    for sample in samples:
        paired.setdefault(sample.connections, {}).setdefault(sample.round, {})[sample.app] = sample
    found: dict[int, dict[str, Any]] = {}
    for connections, rounds in sorted(paired.items()):
        whole = [pair for pair in rounds.values() if set(APPS) <= set(pair)]
        if not whole:
            continue
        each = [ratios(pair["bare"], pair["next"]) for pair in whole]
        found[connections] = {
            "rounds": len(whole),
            "ratios": {key: Spread.of(r[key] for r in each) for key, _ in RATIOS},
            **{
                app: {
                    "rate": Spread.of(pair[app].rate for pair in whole),
                    "service_us": Spread.of(pair[app].service_us for pair in whole),
                    "postgres_us": Spread.of(pair[app].postgres_us for pair in whole),
                }
                for app in APPS
            },
        }
        if all("before" in pair for pair in whole):
            versus = [against(pair["before"], pair["next"]) for pair in whole]
            found[connections]["against"] = {
                key: Spread.of(r[key] for r in versus) for key, _ in RATIOS
            }
        if all("floor" in pair for pair in whole):
            floor = [pair["floor"] for pair in whole]
            over_bare = [ratios(pair["bare"], pair["floor"]) for pair in whole]
            beyond = [against(pair["floor"], pair["next"]) for pair in whole]
            found[connections]["floor"] = {
                "rate": Spread.of(s.rate for s in floor),
                "service_us": Spread.of(s.service_us for s in floor),
                "postgres_us": Spread.of(s.postgres_us for s in floor),
            }
            found[connections]["floor_over_bare"] = {
                key: Spread.of(r[key] for r in over_bare) for key, _ in RATIOS
            }
            found[connections]["over_floor"] = {
                key: Spread.of(r[key] for r in beyond) for key, _ in RATIOS
            }
    return found


def table(found: dict[int, dict[str, Any]]) -> str:
    """The ratios' table, then each app's own figures: medians with their range."""

    def shown(spread: Spread, digits: int = 2) -> str:
        f = f",.{digits}f"
        return f"{spread.median:{f}} ({spread.low:{f}}-{spread.high:{f}})"

    lines = [
        "/next ÷ bare, median (range) over rounds",
        (f"{'conns':>6} {'rounds':>6}  " + "  ".join(f"{t:<28}" for _, t in RATIOS)).rstrip(),
    ]
    for connections, row in found.items():
        cells = "  ".join(f"{shown(row['ratios'][key]):<28}" for key, _ in RATIOS)
        lines.append(f"{connections:>6} {row['rounds']:>6}  {cells}".rstrip())
    for part, title in FLOOR_TABLES:
        rows = {c: row[part] for c, row in found.items() if part in row}
        if rows:
            lines += ["", f"{title}, median (range) over rounds"]
            for connections, spreads in rows.items():
                cells = "  ".join(f"{shown(spreads[key]):<28}" for key, _ in RATIOS)
                rounds = found[connections]["rounds"]
                lines.append(f"{connections:>6} {rounds:>6}  {cells}".rstrip())
    lines += ["", f"{'conns':>6} {'app':>5}  {'rps':<24}{'service µs/req':<22}Postgres µs/req"]
    for connections, row in found.items():
        for app in (*APPS, "floor"):
            if app not in row:
                continue
            figures = row[app]
            lines.append(
                f"{connections:>6} {app:>5}  {shown(figures['rate'], 0):<24}"
                f"{shown(figures['service_us'], 1):<22}{shown(figures['postgres_us'], 1)}"
            )
    versus = {c: row["against"] for c, row in found.items() if "against" in row}
    if versus:
        lines += ["", "/next ÷ the other commit's /next (--against), median (range) over rounds"]
        for connections, row in versus.items():
            cells = "  ".join(f"{shown(row[key]):<28}" for key, _ in RATIOS)
            lines.append(f"{connections:>6} {found[connections]['rounds']:>6}  {cells}".rstrip())
    return "\n".join(lines)


def record(samples: Sequence[Sample], settings: dict[str, Any]) -> dict[str, Any]:
    """The run as JSON: settings, every sample with its derived figures, and the summary."""
    return {
        "kind": "yardstick",
        "settings": settings,
        "samples": [
            {
                **asdict(s),
                "rate": s.rate,
                "service_us": s.service_us,
                "postgres_us": s.postgres_us,
            }
            for s in samples
        ],
        "summary": {str(c): plain(row) for c, row in summary(samples).items()},
    }


def plain(row: dict[str, Any]) -> dict[str, Any]:
    """A summary's row with its Spreads as dicts."""
    return {
        "rounds": row["rounds"],
        **{
            part: {key: asdict(spread) for key, spread in row[part].items()}
            for part in ("ratios", *APPS, "against", "floor", "floor_over_bare", "over_floor")
            if part in row
        },
    }


def cpu(pids: Iterable[int]) -> float:
    """CPU seconds (user and system) these processes and their children have used so far."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for process in (root, *root.children(recursive=True)):
                with contextlib.suppress(psutil.Error):
                    times = process.cpu_times()
                    total += times.user + times.system
    return total


def drive(
    round_: int,
    connections: int,
    app: str,
    url: str,
    service: list[int],
    postgres: list[int],
    args: argparse.Namespace,
    load: Callable[..., wrk.Done] = wrk.measure,
) -> Sample:
    """One wrk drive of `app`, with the CPU its processes and Postgres's spent meanwhile."""
    before = cpu(service), cpu(postgres)
    done = load(url + PATHS[app], connections, args.duration, args.threads)
    after = cpu(service), cpu(postgres)
    return Sample(
        round_,
        connections,
        app,
        done.requests,
        done.seconds,
        after[0] - before[0],
        after[1] - before[1],
    )


def parser() -> argparse.ArgumentParser:
    """The options of `python -m bench.yardstick`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--connections", default="64,1024", help="open connections, comma-separated"
    )
    parser.add_argument("--duration", type=float, default=5, help="seconds per drive")
    parser.add_argument("--rounds", type=int, default=10, help="rounds; medians are shown")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--json", metavar="FILE", help="write the run's record here")
    parser.add_argument(
        "--against", metavar="TREE", help="also drive the numerator checked out in TREE"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also drive the bare app's /batched: a request that waits for a shared frame",
    )
    return parser


def measured(
    args: argparse.Namespace, connections: list[int]
) -> tuple[list[Sample], dict[str, object]]:
    """Serve both apps on one Postgres and drive them round by round: every drive's Sample,
    printed as it comes, and numerator's settings."""
    samples: list[Sample] = []
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(local.database())
        numerator = stack.enter_context(local.serve("numerator", db, 1, {}))
        served = {"bare": stack.enter_context(local.serve("bare", db, 1, {})), "next": numerator}
        databases = {"bare": db, "next": db}
        if args.against:  # its own Postgres: two batchers would take turns at one lease
            databases["before"] = stack.enter_context(local.database())
            served["before"] = stack.enter_context(
                local.serve("numerator", databases["before"], 1, {}, tree=args.against)
            )
        if args.floor:  # the bare app's own process, on another path
            served["floor"], databases["floor"] = served["bare"], db
        for app in ("next", "before"):
            if app in served:
                local.create_counters(served[app].url, ["hot"])
        for app, target in served.items():  # warm up
            wrk.run(target.url + PATHS[app], 64, min(2.0, args.duration), args.threads)
        print(f"{'round':>5} {'conns':>6} {'app':>5} {'rps':>9} {'service µs':>11} {'pg µs':>7}")
        apps = list(served)
        for round_ in range(1, args.rounds + 1):
            for c in connections:
                turn = (round_ - 1) % len(apps)
                for app in apps[turn:] + apps[:turn] if round_ % 2 else apps[::-1]:
                    target = served[app]
                    pids = databases[app].pids
                    sample = drive(round_, c, app, target.url, target.pids, pids, args)
                    samples.append(sample)
                    print(
                        f"{round_:>5} {c:>6} {app:>5} {sample.rate:>9,.0f} "
                        f"{sample.service_us:>11.1f} {sample.postgres_us:>7.1f}",
                        flush=True,
                    )
    return samples, numerator.settings


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed: apt-get install wrk")
    connections = [int(c) for c in args.connections.split(",")]
    load_before, started = os.getloadavg(), time.time()
    print(
        f"one worker each, one Postgres; wrk -t{args.threads}, {args.duration:g}s a drive, "
        f"POST, loopback; load average {load_before[0]:.1f} at the start",
        flush=True,
    )
    samples, service = measured(args, connections)
    load_after = os.getloadavg()
    print()
    print(table(summary(samples)))
    print(f"load average {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end")
    if args.json:
        settings = {
            "rounds": args.rounds,
            "duration_s": args.duration,
            "threads": args.threads,
            "connections": connections,
            "service": service,
            "started_at": started,
            "load_average": {"start": load_before, "end": load_after},
            "cpus": os.cpu_count(),
            "argv": sys.argv,
        }
        with open(args.json, "w") as out:
            json.dump(record(samples, settings), out, indent=2)
        print(f"record: {args.json}")


if __name__ == "__main__":
    main()
