"""One hot counter with one worker, with two that each batch on their own, and with two that hand
their front frames to the machine's one batcher (two tiers), measured in one run, in alternating
rounds.

    python -m bench.tiers --rounds 5 --duration 5 --connections 64,1024 --json tiers.json

Starts one throwaway embedded Postgres and on it `numerator serve` once a set-up: `--workers 1`
(`one`), `--workers 2 --tiers 1` (`own`) and `--workers 2` (`two`, the default); with `--setups`
also `--workers 3` (`three`). Each round
drives `POST /counters/hot/next` on each in turn with wrk (who goes first turns round), taking
the rate, the CPU time of the service's processes and of Postgres's a request, and the frames
committed over the drive (`numerator_frames_committed_total`: a frame is one Postgres
transaction). Then per connection count, each set-up's rate and transactions a second as a ratio
to `one`'s in the same round: their median and range over rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench import local, wrk
from bench.scrape import scrape
from bench.yardstick import Spread, cpu

SETUPS = {"one": (1, "2"), "own": (2, "1"), "two": (2, "2"), "three": (3, "2")}
"""name: (workers, TIERS); `three`, two tiers with three workers (`--setups`), shows whether a
hot counter's transactions grow with the workers."""
DEFAULT_SETUPS = "one,own,two"
PATH = "/counters/hot/next"


@dataclass(frozen=True)
class Drive:
    round: int
    connections: int
    setup: str
    requests: int
    seconds: float
    service: float  # CPU seconds of the service's processes
    postgres: float
    frames: float  # frames committed

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def transactions(self) -> float:
        return self.frames / self.seconds

    @property
    def cpu_us(self) -> float:
        return (self.service + self.postgres) / self.requests * 1e6


def committed(url: str) -> float:
    """Frames committed so far, by every batcher of the service (its /metrics adds them up)."""
    return scrape(url).get("numerator_frames_committed_total", 0.0)


def drive(
    round_: int, connections: int, setup: str, target: local.Target, pg: list[int], seconds: float
) -> Drive:
    frames, before = committed(target.url), (cpu(target.pids), cpu(pg))
    done = wrk.measure(target.url + PATH, connections, seconds)
    after = cpu(target.pids), cpu(pg)
    time.sleep(0.6)  # the workers write their metrics every 0.5 s (infra/observe/workers.py)
    return Drive(
        round_,
        connections,
        setup,
        done.requests,
        done.seconds,
        after[0] - before[0],
        after[1] - before[1],
        committed(target.url) - frames,
    )


def summary(
    drives: Sequence[Drive], setups: Sequence[str]
) -> dict[int, dict[str, dict[str, Spread]]]:
    """Per connection count and set-up: rate, transactions a second and CPU a request, and
    rate and transactions as a ratio to `one`'s in the same round."""
    rounds: dict[int, dict[int, dict[str, Drive]]] = {}
    for d in drives:
        rounds.setdefault(d.connections, {}).setdefault(d.round, {})[d.setup] = d
    found: dict[int, dict[str, dict[str, Spread]]] = {}
    for connections, by_round in sorted(rounds.items()):
        whole = [r for r in by_round.values() if set(setups) <= set(r)]
        if not whole:
            continue
        found[connections] = {
            setup: {
                "rps": Spread.of(r[setup].rate for r in whole),
                "txn_s": Spread.of(r[setup].transactions for r in whole),
                "cpu_us": Spread.of(r[setup].cpu_us for r in whole),
                "rate_ratio": Spread.of(r[setup].rate / r["one"].rate for r in whole),
                "txn_ratio": Spread.of(
                    r[setup].transactions / max(r["one"].transactions, 1e-9) for r in whole
                ),
            }
            for setup in setups
        }
    return found


def table(found: dict[int, dict[str, dict[str, Spread]]]) -> str:
    def shown(spread: Spread, digits: int) -> str:
        f = f",.{digits}f"
        return f"{spread.median:{f}} ({spread.low:{f}}-{spread.high:{f}})"

    lines = [
        "median (range) over rounds; ratios to `one` (--workers 1) in the same round",
        f"{'conns':>6} {'setup':>5}  {'rps':<24}{'÷ one':<19}{'txn/s':<20}{'÷ one':<19}"
        "CPU µs/request (service+Postgres)",
    ]
    for connections, setups in found.items():
        for setup, row in setups.items():
            lines.append(
                f"{connections:>6} {setup:>5}  {shown(row['rps'], 0):<24}"
                f"{shown(row['rate_ratio'], 2):<19}{shown(row['txn_s'], 0):<20}"
                f"{shown(row['txn_ratio'], 2):<19}{shown(row['cpu_us'], 1)}"
            )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", default="64,1024", help="comma-separated")
    parser.add_argument("--duration", type=float, default=5, help="seconds per drive")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; medians are shown")
    parser.add_argument(
        "--setups",
        default=DEFAULT_SETUPS,
        help=f"comma-separated, `one` among them: {', '.join(SETUPS)}",
    )
    parser.add_argument("--json", metavar="FILE", help="write the run's record here")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed: apt-get install wrk")
    connections = [int(c) for c in args.connections.split(",")]
    setups = args.setups.split(",")
    if "one" not in setups or not set(setups) <= set(SETUPS):
        raise SystemExit(f"--setups: `one` and any of {', '.join(SETUPS)}")
    load_before, started = os.getloadavg(), time.time()
    print(
        f"one hot counter; wrk -t1, {args.duration:g}s a drive, POST, loopback; "
        f"load average {load_before[0]:.1f} at the start",
        flush=True,
    )
    drives = run(setups, connections, args.rounds, args.duration)
    load_after = os.getloadavg()
    found = summary(drives, setups)
    print()
    print(table(found))
    print(f"load average {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end")
    if args.json:
        settings = {
            "rounds": args.rounds,
            "duration_s": args.duration,
            "connections": connections,
            "setups": setups,
            "started_at": started,
            "load_average": {"start": load_before, "end": load_after},
            "cpus": os.cpu_count(),
            "argv": sys.argv,
        }
        write(args.json, settings, drives, found)


def run(
    setups: Sequence[str], connections: Sequence[int], rounds: int, seconds: float
) -> list[Drive]:
    """Every drive of the run: the set-ups served on one Postgres, warmed up, then in each round
    each connection count on each set-up, who goes first turning round."""
    drives: list[Drive] = []
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(local.database())
        served = {
            name: stack.enter_context(local.serve("numerator", db, workers, {"TIERS": tiers}))
            for name, (workers, tiers) in SETUPS.items()
            if name in setups
        }
        local.create_counters(served["one"].url, ["hot"])
        for target in served.values():  # warm up
            wrk.run(target.url + PATH, 64, min(2.0, seconds))
        print(f"{'round':>5} {'conns':>6} {'setup':>5} {'rps':>9} {'txn/s':>7} {'CPU µs':>7}")
        names = list(served)
        for round_ in range(1, rounds + 1):
            for c in connections:
                turn = (round_ - 1) % len(names)
                for name in names[turn:] + names[:turn]:
                    d = drive(round_, c, name, served[name], db.pids, seconds)
                    drives.append(d)
                    print(
                        f"{round_:>5} {c:>6} {name:>5} {d.rate:>9,.0f} {d.transactions:>7,.0f} "
                        f"{d.cpu_us:>7.1f}",
                        flush=True,
                    )
    return drives


def write(
    path: str,
    settings: dict[str, Any],
    drives: Sequence[Drive],
    found: dict[int, dict[str, dict[str, Spread]]],
) -> None:
    record: dict[str, Any] = {
        "kind": "tiers",
        "settings": settings,
        "drives": [asdict(d) for d in drives],
        "summary": {
            str(c): {s: {k: asdict(v) for k, v in row.items()} for s, row in rows.items()}
            for c, rows in found.items()
        },
    }
    with open(path, "w") as out:
        json.dump(record, out, indent=2)
    print(f"record: {path}")


if __name__ == "__main__":
    main()
