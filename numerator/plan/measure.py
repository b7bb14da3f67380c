"""The bench's measurements the plan reads (measured.json), made again by one command:

    numerator plan --measure            # about ten minutes: two or three rates per edge on moto

Each run is `numerator bench --aws moto --edge EDGE --schedule 'const(RATE,10s) const(RATE,8s)'`
in a child process, exactly as a user would type it; what the plan needs of its JSON is kept (AWS
calls by call, the reply wait of the second step, warm, the edge's CPU, transactions), with the
commit rate of a Postgres on this machine and the bytes of a front frame's record.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench.record import read_json
from infra.wire import Record, encode, reply_key
from numerator.plan.model import MEASURED, EdgeKind, PlanError, edge_cpu

# Rates within what moto and the Lambda edge's 8 simulated containers hold on one machine. The
# server edge's CPU sizes its tasks, fitted as a fixed part and a part per request: from two
# points one slow phase of moto's made the slope a third of its usual (2026-12-02), so three.
RATES = {
    EdgeKind.SERVER: (300.0, 650.0, 1000.0),
    EdgeKind.LAMBDA: (6.0, 16.0),
    EdgeKind.ATOMIC: (30.0, 90.0),
}
SHARDS = {EdgeKind.LAMBDA: 4, EdgeKind.SERVER: 4}
"""Both edges' streams have shards read on phased beats (READ_BEATS, the default): a record
waits for a read half a gap between phases (a server edge's front frame, half a gap between its
frames), so each is measured on four, as an on-demand stream starts, and the plan works the wait
out at its own shards from there (model.read_wait, model.front_frames_per_s)."""
SECONDS, WARM_S = 8, 10
"""Each run serves its rate for WARM_S, then SECONDS more, and the plan keeps the latency of
those last seconds (the bench's last step, its first second left out): a month is served by warm
containers that know their lag and their shards, and the first seconds of a run are not. The
Lambda edge at 6 rps on moto, 2026-12-03, by the second from its start: mean 294, 124, 123, 111,
109, 86, 80, 78, 77, 75, 74 and 72 ms; 283, 121, 119, 111, 104, 146, 107, 101, 96, 82, 78 and 76
in the next run. Each of the 8 simulated containers starts cold, learns its shards and learns when
replies are written from its own requests, of which at 6 rps it gets one every second or so."""
REACHED, TRIES = 0.95, 3
"""A run that served less than this share of its rate is measured again, up to TRIES in all: it
ran in one of moto's slow phases (2026-12-03: 837 of 1,000 rps, at 22 % of a core against 40 %
at 635 rps), and the fits would take it for what that rate costs."""
COMMAND = "numerator plan --measure"
REPEATS = {EdgeKind.LAMBDA: 5}
"""Runs of each rate, the one of median reply wait kept (the others in `discarded`): the plan
bills the Lambda edge's wait, and moto's phases make one run a coin toss: eight runs at 6 rps on
a quiet machine, 2026-12-03, had a mean wait of 95, 96, 134, 140, 144, 154, 178 and 325 ms
(moto's PutRecord took 12 to 28 ms a call from one run to the next). The probe likewise (its CPU
a warm invocation: 10.1 to 15.0 ms in eleven runs)."""


CPU_EDGES = (EdgeKind.LAMBDA, EdgeKind.ATOMIC)  # the Lambdas: a warm invocation's CPU


def invocation_cpu(say: Any, runs: int = REPEATS[EdgeKind.LAMBDA]) -> dict[str, float]:
    """A Lambda's CPU a warm invocation, ms on a whole core, for the Lambda edge and the atomic
    counter: one container each, alone in a process (numerator/plan/probe.py); the median of
    `runs` probes, each edge's own."""
    say(f"a Lambda's CPU a warm invocation, one container alone (numerator.plan.probe) x{runs} ...")
    found: dict[str, list[float]] = {}
    for _ in range(runs):
        argv = [sys.executable, "-m", "numerator.plan.probe"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            raise PlanError(f"numerator.plan.probe failed: {done.stderr[-2000:]}")
        for k, v in orjson.loads(lines[-1])["invocation_cpu_ms"].items():
            found.setdefault(str(k), []).append(float(v))
    say("  " + "; ".join(f"{k}: {', '.join(f'{v:g}' for v in vs)} ms" for k, vs in found.items()))
    return {k: statistics.median(vs) for k, vs in found.items()}


def measure_cpu(path: Path = MEASURED, say: Any = print) -> dict[str, Any]:
    """Measure again only the Lambdas' CPU a warm invocation (about two minutes), keeping the rest
    of `path`."""
    data: dict[str, Any] = orjson.loads(path.read_bytes())
    data["invocation_cpu_ms"] = invocation_cpu(say)
    data["invocation_cpu_measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    return data


def log_bytes(say: Any) -> dict[str, float]:
    """Bytes logged a warm /next on each edge, and one EMF line's (numerator/plan/logprobe.py)."""
    out: dict[str, float] = {}
    for which in ("lambda", "server"):
        say(f"bytes logged a request, the {which} edge (numerator.plan.logprobe {which}) ...")
        argv = [sys.executable, "-m", "numerator.plan.logprobe", which]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith('{"log_bytes"')]
        if done.returncode != 0 or not lines:
            raise PlanError(f"numerator.plan.logprobe {which} failed: {done.stderr[-2000:]}")
        out.update(orjson.loads(lines[-1])["log_bytes"])
    say("  " + ", ".join(f"{k} {v:g}" for k, v in out.items()))
    return out


def measure_logs(path: Path = MEASURED, say: Any = print) -> dict[str, Any]:
    """Measure again only the bytes logged a request (about a minute), keeping the rest."""
    data: dict[str, Any] = orjson.loads(path.read_bytes())
    data["log_bytes"] = log_bytes(say)
    data["log_bytes_measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    return data


def bench(edge: EdgeKind, rate: float, seconds: int = SECONDS) -> dict[str, Any]:
    """One bench run on moto, as the plan keeps it."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run.json"
        how = (
            ["--edge", "server", "--compare"] if edge is EdgeKind.ATOMIC else ["--edge", str(edge)]
        )
        argv = [
            sys.executable, "-m", "numerator", "bench", "--aws", "moto", *how,
            "--schedule", f"const({rate:g},{WARM_S}s) const({rate:g},{seconds}s)",
            "--json", str(out), "--quiet",
        ]  # fmt: skip
        env = {**os.environ, "SHARDS": str(SHARDS.get(edge, 1))}
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=300, check=False, env=env
        )
        if done.returncode != 0 or not out.exists():
            raise PlanError(f"{' '.join(argv[2:])} failed: {done.stderr[-2000:]}")
        runs = read_json(out)
    if edge is EdgeKind.ATOMIC:  # --compare ran it last, beside numerator
        return kept(edge, rate, runs[-1])
    return kept(edge, rate, runs[0])


def kept(edge: EdgeKind, rate: float, run: dict[str, Any]) -> dict[str, Any]:
    """What the plan reads of one bench run's JSON."""
    summary, totals = run["summary"], run["service"]["totals"]
    warm = run["steps"][-1]  # the run after WARM_S: its latency is what the plan bills
    settings = run["settings"]
    edge_cpu = (totals.get("cpu_pct_by_tier") or {}).get("edge") or 0.0
    duration = summary["duration_s"]
    return {
        "offered_rps": rate,
        "rps": summary["rps_mean"],
        "duration_s": duration,
        "edge_processes": settings["workers"] if edge is EdgeKind.SERVER else 0,
        "shards": settings.get("shards") or 0,
        "read_beats": settings.get("read_beats") or "shared",
        "read_interval_ms": settings.get("read_interval_ms") or 200,
        "front_frame_ms": settings.get("front_frame_ms") or 0,
        "front_frame_policy": settings.get("front_frame_policy") or "fixed",
        "batchers": settings.get("batchers") or 0,
        "calls": {k[4:]: v for k, v in totals.items() if k.startswith("aws:") and v},
        "call_ms": {  # each call's mean latency (numerator_aws_call_seconds_total)
            k[6:]: round(v / totals[f"aws:{k[6:]}"] * 1000, 2)
            for k, v in totals.items()
            if k.startswith("aws_s:") and totals.get(f"aws:{k[6:]}")
        },
        "records_put": totals.get("records_put", 0.0),
        "reply_units": {
            "read": totals.get("reply_units_read", 0.0),
            "write": totals.get("reply_units_written", 0.0),
        },
        "reply_items": {
            "read": totals.get("reply_items_read", 0.0),
            "written": totals.get("reply_items_written", 0.0),
        },
        "latency_mean_ms": warm["latency_mean_ms"],
        "latency_p50_ms": warm["latency_p50_ms"],
        "schedule": run["scenario"]["schedule"],  # the latency: its last step's, less a second
        "edge_cpu_pct": edge_cpu,
        "transactions_per_shard_s": (
            totals.get("transactions", 0.0) / duration / (settings.get("shards") or 1)
        ),
    }


def commits_per_second(seconds: float = 3.0) -> float:
    """Transactions a second one connection commits on a throwaway embedded Postgres here."""
    import psycopg

    from bench.local import database

    with database() as db, psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS plan_commits (n bigint)")
        done, began = 0, time.monotonic()
        while time.monotonic() - began < seconds:
            with conn.transaction():
                conn.execute("INSERT INTO plan_commits VALUES (%s)", (done,))
            done += 1
        return done / (time.monotonic() - began)


def record_bytes() -> int:
    """A front frame's record of a busy counter, from four API keys, as it goes on the stream."""
    who = [[50, f"key:{n:012d}"] for n in range(4)]
    record = Record(reply_key(), "invoices-2026", 200, None, time.time(), time.time(), who)
    return len(encode(record))


def cpu_fit(runs: list[dict[str, Any]]) -> str:
    """The server edge's CPU as the plan fits it, and how far each run is from the fit: a run
    far off (a slow phase of moto's) is worth measuring again."""
    cpu = edge_cpu(runs)
    off = [
        f"{run['rps']:.0f} rps {run['edge_cpu_pct']:.1f} % "
        f"({run['edge_cpu_pct'] / 100 / cpu.at(run['rps'], 1.0) - 1:+.0%})"
        for run in runs
    ]
    return (
        f"server edge CPU: {cpu.fixed:.1%} of a core + {cpu.per_request * 1000:.3f} ms a request; "
        f"the runs against it: {', '.join(off)}"
    )


def reached(
    edge: EdgeKind, rate: float, say: Any, discarded: list[dict[str, Any]]
) -> dict[str, Any]:
    """A run at `rate` that served it (up to TRIES), the others kept in `discarded`."""
    run = bench(edge, rate)
    for _ in range(TRIES - 1):
        if run["rps"] >= REACHED * rate:
            break
        # moto's slow phase, not this rate: its CPU and calls are another rate's
        say(f"  served {run['rps']:.0f} rps of {rate:g}: not kept, measured again")
        discarded.append({"edge": str(edge), **run})
        run = bench(edge, rate)
    return run


def measure(
    path: Path = MEASURED, say: Any = print, only: set[EdgeKind] | None = None
) -> dict[str, Any]:
    """Measure every edge, or `only` some, keeping the others' runs from `path`."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    edges: dict[str, list[dict[str, Any]]] = {}
    discarded: list[dict[str, Any]] = []
    when: dict[str, str] = {}
    old: dict[str, Any] = {}
    if only is not None:
        old = orjson.loads(path.read_bytes())
        edges = dict(old["edges"])
        discarded = [run for run in old.get("discarded", []) if EdgeKind(run["edge"]) not in only]
        when = old.get("edges_measured_at") or dict.fromkeys(edges, old["measured_at"])
    for edge, rates in RATES.items():
        if only is not None and edge not in only:
            continue
        edges[str(edge)] = []
        when[str(edge)] = now
        for rate in rates:
            say(f"{edge}: {rate:g} rps on moto ...")
            runs = [reached(edge, rate, say, discarded) for _ in range(REPEATS.get(edge, 1))]
            runs.sort(key=lambda run: float(run["latency_mean_ms"]))
            median = runs[(len(runs) - 1) // 2]
            if len(runs) > 1:
                waits = ", ".join(f"{run['latency_mean_ms']:.0f}" for run in runs)
                say(f"  mean waits {waits} ms: the median kept")
            discarded += [{"edge": str(edge), **run} for run in runs if run is not median]
            edges[str(edge)].append(median)
    if only is None or EdgeKind.SERVER in only:
        say(cpu_fit(edges[str(EdgeKind.SERVER)]))
    cpu = dict(old.get("invocation_cpu_ms") or {})
    cpu_at = old.get("invocation_cpu_measured_at", now)
    if only is None or only.intersection(CPU_EDGES):
        cpu, cpu_at = invocation_cpu(say), now
    logs = old.get("log_bytes") or log_bytes(say)
    logs_at = old.get("log_bytes_measured_at", now) if old.get("log_bytes") else now
    say("Postgres commits a second ...")
    out = {
        "command": COMMAND,
        "measured_at": now,
        "edges_measured_at": when or dict.fromkeys(edges, now),
        "note": "numerator bench --aws moto on one machine; see numerator/plan/measure.py",
        "record_bytes": record_bytes(),
        "commits_per_s": round(commits_per_second()),
        "edges": edges,
        "discarded": discarded,
        "invocation_cpu_ms": cpu,
        "invocation_cpu_measured_at": cpu_at,
        "log_bytes": logs,
        "log_bytes_measured_at": logs_at,
    }
    path.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n")
    return out
