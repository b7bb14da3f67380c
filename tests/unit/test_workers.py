"""A server's worker processes' metrics as one: each writes its own to the shared directory,
and /metrics adds them up (infra.observe.workers)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import orjson

from infra.observe.metrics import Metrics
from infra.observe.workers import WRITE_EVERY_S, Workers, sharing


def other_worker(directory: Path, pid: int, requests: int, leases: int) -> None:
    metrics = Metrics()
    metrics.next_requests.inc(requests)
    metrics.leases_held.set(leases)
    (directory / f"{pid}.json").write_bytes(orjson.dumps(metrics.state()))


def gone_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_a_scrape_adds_every_workers_metrics_to_its_own_as_they_are_now(tmp_path: Path) -> None:
    mine = Metrics()
    mine.next_requests.inc(5)
    mine.leases_held.set(1)
    other_worker(tmp_path, os.getppid(), requests=7, leases=2)  # a live process
    other_worker(tmp_path, gone_pid(), requests=11, leases=4)  # a worker that died
    workers = Workers(tmp_path, lambda: mine)
    total = workers.total()
    assert total.next_requests.value == 5 + 7 + 11, "what a dead worker counted stays"
    assert total.leases_held.value == 1 + 2, "what a dead worker held does not"
    mine.next_requests.inc()
    assert workers.total().next_requests.value == 24, "this worker's part is never stale"


def test_a_worker_writes_its_metrics_while_it_serves_and_when_it_stops(tmp_path: Path) -> None:
    mine = Metrics()

    def written() -> float:
        return float(
            orjson.loads((tmp_path / f"{os.getpid()}.json").read_bytes())[
                "numerator_next_requests_total"
            ]
        )

    async def serve() -> list[float]:
        seen = []
        async with sharing(tmp_path, lambda: mine):
            seen.append(written())
            mine.next_requests.inc(3)
            await asyncio.sleep(WRITE_EVERY_S * 2.5)
            seen.append(written())
            mine.next_requests.inc(4)
        seen.append(written())
        return seen

    assert asyncio.run(serve()) == [0, 3, 7]
    assert [p.name for p in tmp_path.iterdir()] == [f"{os.getpid()}.json"], "no part files left"
