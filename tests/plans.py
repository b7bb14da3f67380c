"""Made-up measurements for `numerator plan`'s tests, and the command as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from typing import Any


def run(rps: float, duration: float, calls: dict[str, float], **more: Any) -> dict[str, Any]:
    return {
        "rps": rps,
        "duration_s": duration,
        "edge_processes": more.get("edges", 1),
        "shards": 1,
        "batchers": 1,
        "calls": {k: v * duration for k, v in calls.items()},  # totals, as the bench counts
        "latency_mean_ms": more.get("wait_ms", 200.0),
        "edge_cpu_pct": more.get("cpu", 0.0),
        "transactions_per_shard_s": 5.0,
    }


LAMBDA_CALLS = {"get_records": 5, "batch_write_item": 5}

MEASURED: dict[str, Any] = {
    "measured_at": "2026-12-01T00:00:00+00:00",
    "command": "made up",
    "record_bytes": 200,
    "commits_per_s": 1000,
    "edges": {
        # per second: put_record 50 per process whatever the rate, get_records 5 per shard,
        # batch_get_item 30 per process + 0.01 per request; CPU 20 % + 0.02 % per rps
        "server": [
            run(300, 10, {"put_record": 50, "get_records": 5, "batch_get_item": 33}, cpu=26),
            run(1000, 10, {"put_record": 50, "get_records": 5, "batch_get_item": 40}, cpu=40),
        ],
        # every request: one put_record and two polls; get_records 5 per shard; on one shard
        # read on shared beats (reply writes: a BatchWriteItem a frame, worked out, not fitted)
        "lambda": [
            run(6, 8, {**LAMBDA_CALLS, "put_record": 6, "batch_get_item": 12}, edges=0),
            run(16, 8, {**LAMBDA_CALLS, "put_record": 16, "batch_get_item": 32}, edges=0),
        ],
        # the atomic counter: one update_item per request, 10 ms each
        "atomic": [
            run(30, 8, {"update_item": 30}, edges=0, wait_ms=10.0) | {"shards": 0, "batchers": 0},
            run(90, 8, {"update_item": 90}, edges=0, wait_ms=12.0) | {"shards": 0, "batchers": 0},
        ],
    },
}


def numerator(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "numerator", "plan", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
