"""A run, kept as a record: the whole of it as JSON, one summary row of plain columns in CSV and
in a Postgres table (`bench_runs`, with the whole run beside the columns as jsonb)."""

from __future__ import annotations

import csv
import json
import os
import platform
import socket
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg.types.json import Jsonb

from bench import histogram
from bench.load import Result
from bench.schedule import Schedule
from bench.steps import steps
from bench.verdict import verdict

# The summary row, in order: what a spreadsheet or SELECT sees.
COLUMNS: dict[str, str] = {
    "run_id": "text",
    "started_at": "timestamptz",
    "description": "text",
    "target": "text",
    "mode": "text",
    "schedule": "text",
    "duration_s": "double precision",
    "offered_rps": "double precision",
    "rps_mean": "double precision",
    "requests": "bigint",
    "ok": "bigint",
    "bad_responses": "bigint",
    "errors": "bigint",
    "missed_sends": "bigint",
    "latency_p50_ms": "double precision",
    "latency_p90_ms": "double precision",
    "latency_p95_ms": "double precision",
    "latency_p99_ms": "double precision",
    "latency_p999_ms": "double precision",
    "latency_max_ms": "double precision",
    "latency_mean_ms": "double precision",
    "cpu_pct": "double precision",
    "rss_mb": "double precision",
    "generator_cpu_pct": "double precision",
    "records_in": "bigint",
    "records_out": "bigint",
    "transactions": "bigint",
    "requests_per_txn": "double precision",
    "frame_size_mean": "double precision",
    "dead_letters": "bigint",
    "lag_max_s": "double precision",
    "aws_calls_per_request": "double precision",
    "back_frame_ms": "double precision",
    "workers": "integer",
    "connections": "integer",
    "counters": "integer",
    "mix": "text",
    "count": "integer",
    "version": "text",
    "host": "text",
}


def machine() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def build(
    *,
    run_id: str,
    started_at: str,
    description: str,
    target: str,
    mode: str,
    scenario: dict[str, Any],
    settings: dict[str, Any],
    result: Result,
    service: dict[str, Any],
    service_seconds: list[dict[str, Any]],
    version: str,
) -> dict[str, Any]:
    """The whole run as one JSON-able dict; `summary` holds the plain columns."""
    latency = result.latency
    lat = histogram.summary(latency)
    host = machine()
    columns = {
        "run_id": run_id,
        "started_at": started_at,
        "description": description,
        "target": target,
        "mode": mode,
        **client_columns(result, scenario, lat),
        **service_columns(service),
        "back_frame_ms": settings.get("back_frame_ms"),
        "workers": settings.get("workers"),
        "connections": scenario["connections"],
        "counters": scenario["counters"],
        "mix": scenario["mix"],
        "count": scenario["count"],
        "version": version,
        "host": host["host"],
    }
    summary = {name: columns[name] for name in COLUMNS}  # in the table's order
    run = {
        "summary": summary,
        "scenario": scenario,
        "settings": settings,
        "machine": host,
        "client": {
            "statuses": {str(k): v for k, v in sorted(result.statuses.items())},
            "errors": dict(result.errors),
            "missed_sends": result.missed,
            "worst_late_ms": round(result.worst_late_ms, 3),
            "cpu_pct": round(result.cpu_pct, 1),
            "latency_ms": lat,
            "distribution": histogram.distribution(latency),
            "histogram": histogram.encode(latency),
            "per_second": [s.to_json(at) for at, s in sorted(result.per_second.items())],
        },
        "service": {"totals": service, "per_second": service_seconds},
        "steps": steps(Schedule.parse(scenario["schedule"]), result, service_seconds),
    }
    run["verdict"] = verdict(run).to_json()
    return run


def client_columns(
    result: Result, scenario: dict[str, Any], lat: dict[str, float]
) -> dict[str, Any]:
    """The summary's columns that the generator measured."""
    seconds = max(result.seconds, 1e-9)
    return {
        "schedule": scenario["schedule"],
        "duration_s": round(result.seconds, 3),
        "offered_rps": round(result.offered / Schedule.parse(scenario["schedule"]).seconds, 2),
        "rps_mean": round(result.ok / seconds, 2),
        "requests": result.sent,
        "ok": result.ok,
        "bad_responses": result.bad,
        "errors": sum(result.errors.values()),
        "missed_sends": result.missed,
        "latency_p50_ms": lat["p50"],
        "latency_p90_ms": lat["p90"],
        "latency_p95_ms": lat["p95"],
        "latency_p99_ms": lat["p99"],
        "latency_p999_ms": lat["p999"],
        "latency_max_ms": lat["max"],
        "latency_mean_ms": round(lat["mean"], 3),
        "generator_cpu_pct": round(result.cpu_pct, 1),
    }


def service_columns(service: dict[str, Any]) -> dict[str, Any]:
    """The summary's columns that the service's processes and metrics gave."""
    return {
        "cpu_pct": _round(service.get("cpu_pct")),
        "rss_mb": _round(service.get("rss_mb")),
        "records_in": int(service.get("records_in", 0)),
        "records_out": int(service.get("records_out", 0)),
        "transactions": int(service.get("transactions", 0)),
        "requests_per_txn": _round(service.get("requests_per_txn")),
        "frame_size_mean": _round(service.get("frame_size_mean")),
        "dead_letters": int(service.get("dead_letters", 0)),
        "lag_max_s": _round(service.get("lag_max_s")),
        "aws_calls_per_request": _round(service.get("aws_calls_per_request")),
    }


def _round(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def write_json(path: Path, runs: list[dict[str, Any]]) -> None:
    """One run as an object; several (a --compare) as {"runs": [...]}."""
    body: Any = runs[0] if len(runs) == 1 else {"runs": runs}
    path.write_text(json.dumps(body, indent=1, default=str))


def read_json(path: Path) -> list[dict[str, Any]]:
    body = json.loads(path.read_text())
    return list(body["runs"]) if "runs" in body else [body]


def append_csv(path: Path, runs: list[dict[str, Any]]) -> None:
    exists = path.exists() and path.stat().st_size > 0
    if exists:
        with path.open(newline="") as handle:
            header = next(csv.reader(handle), [])
        if header != list(COLUMNS):
            raise ValueError(f"{path} has other columns than this version writes; use a new file")
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(COLUMNS))
        if not exists:
            writer.writeheader()
        for run in runs:
            writer.writerow({k: "" if v is None else v for k, v in run["summary"].items()})


def read_csv(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


TABLE = (
    "CREATE TABLE IF NOT EXISTS bench_runs ("
    + ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
    + ", run jsonb NOT NULL, PRIMARY KEY (run_id, target))"
)


# A table made by an older version gains the columns added since.
UPGRADE = "ALTER TABLE bench_runs " + ", ".join(
    f"ADD COLUMN IF NOT EXISTS {name} {kind}" for name, kind in COLUMNS.items()
)


def insert_db(url: str, runs: list[dict[str, Any]]) -> None:
    names = list(COLUMNS)
    sql = (
        f"INSERT INTO bench_runs ({', '.join(names)}, run) "
        f"VALUES ({', '.join(['%s'] * (len(names) + 1))})"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute(UPGRADE)
        for run in runs:
            summary = run["summary"]
            conn.execute(sql, [*(summary[n] for n in names), Jsonb(run)])


def read_db(url: str, limit: int = 50) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The latest runs' rows (newest first) and the whole runs of the newest invocation."""
    with psycopg.connect(url) as conn:
        conn.execute(TABLE)
        conn.execute(UPGRADE)
        cur = conn.execute(
            f"SELECT {', '.join(COLUMNS)} FROM bench_runs ORDER BY started_at DESC LIMIT %s",
            (limit,),
        )
        names = [d.name for d in cur.description or []]
        rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        if not rows:
            return [], []
        cur = conn.execute(
            "SELECT run FROM bench_runs WHERE run_id = %s ORDER BY target", (rows[0]["run_id"],)
        )
        latest = [row[0] for row in cur.fetchall()]
    return rows, latest
