"""Two tiers on one machine as a user runs them: `numerator up --workers 2` starts one batcher
process beside its HTTP workers (`numerator batcher --hub SOCKET`), whose frames the service's
/metrics counts and whose link each worker's /healthz reports; `--tiers 1` starts none."""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil
import pytest

from bench.scrape import parse
from infra.observe.workers import WRITE_EVERY_S
from tests.e2e.service import Service, wait_for

pytestmark = pytest.mark.slow

FRAMES = "numerator_frames_committed_total"


def batchers_of(service: Service) -> list[psutil.Process]:
    """The machine's batchers `up` started: `numerator batcher --hub SOCKET`."""
    found = []
    for process in psutil.Process(service.process.pid).children(recursive=True):
        command = process.cmdline()
        if "batcher" in command and "--hub" in command:
            found.append(process)
    return found


def take(url: str, name: str) -> int:
    response = httpx.post(f"{url}/counters/{name}/next", timeout=10)
    assert response.status_code == 200, response.text
    value: int = response.json()["value"]
    return value


def test_two_workers_share_one_batcher_process_that_metrics_and_healthz_report(
    tmp_path: Path,
) -> None:
    with Service("--ephemeral", "--workers", "2") as service:
        url = service.url
        assert len(batchers_of(service)) == 1, service.said()
        assert httpx.post(f"{url}/counters", json={"name": "inv"}).status_code == 201
        taken = [take(url, "inv") for _ in range(10)]
        checks = [httpx.get(f"{url}/healthz", timeout=5).json() for _ in range(4)]

        def committed() -> bool:
            return parse(httpx.get(f"{url}/metrics", timeout=5).text).get(FRAMES, 0) > 0

        wait_for(committed, WRITE_EVERY_S + 5, f"{FRAMES} counted at the service's /metrics")
    assert taken == list(range(1, 11))
    assert all(check["batcher"] == "ok" for check in checks), checks


def test_one_tier_starts_no_batcher_process(tmp_path: Path) -> None:
    with Service("--ephemeral", "--workers", "2", "--tiers", "1") as service:
        assert batchers_of(service) == [], service.said()
        assert httpx.post(f"{service.url}/counters", json={"name": "inv"}).status_code == 201
        assert sorted(take(service.url, "inv") for _ in range(4)) == [1, 2, 3, 4]
