"""An edge that dies holding requests (guarantee 5, every gap explained): the values the batcher
issued to them are listed by the report as `unsure`, their replies may not have reached their
clients, with the requests that took them; and nothing else is."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from infra.observe.health import EDGE_DEAD_S
from tests.e2e.service import Service, data_dir
from tests.e2e.test_supervision import child, wait_for

pytestmark = pytest.mark.slow


def post(url: str) -> int | None:
    try:
        return httpx.post(url, timeout=30).status_code
    except httpx.HTTPError:
        return None


def test_values_issued_to_an_edge_killed_while_it_waited_are_listed_as_unsure(
    tmp_path: Path,
) -> None:
    folder = data_dir(tmp_path)
    service = Service("--aws", "moto", "--data-dir", folder)
    try:
        assert httpx.post(service.url + "/counters", json={"name": "u"}, timeout=30).is_success
        answered = httpx.post(service.url + "/counters/u/next", timeout=30).json()["value"]
        time.sleep(2.5)  # the edge says all its requests were answered
        batcher = child(service, "numerator batcher")
        edge = next(
            p
            for p in psutil.Process(service.process.pid).children()
            if "numerator up" in " ".join(p.cmdline())
        )
        batcher.send_signal(signal.SIGSTOP)  # the records wait on the stream
        with ThreadPoolExecutor(3) as pool:
            waiting = [pool.submit(post, service.url + "/counters/u/next") for _ in range(3)]
            time.sleep(1.0)
            edge.send_signal(signal.SIGKILL)
            batcher.send_signal(signal.SIGCONT)  # it applies them; no edge reads the replies
            cut = [one.result(60) for one in waiting]
        wait_for(lambda: "Respawning worker" in service.said(), 20, "a new worker")
    finally:
        service.stop()
    assert cut == [None, None, None], "the edge died before it answered"
    with Service("--aws", "moto", "--data-dir", folder) as again:
        deadline = time.monotonic() + EDGE_DEAD_S + 10
        while True:
            report = httpx.get(again.url + "/counters/u/report", timeout=30).json()
            if report["unsure"] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert report["issued"] == 4 and report["unexplained_gaps"] == 0, report
    unsure = {v for run in report["unsure_runs"] for v in range(run["first"], run["last"] + 1)}
    assert {2, 3, 4} == unsure - {answered}, report
    assert all(run["who"] == "127.0.0.1" and run["edge"] for run in report["unsure_runs"])
    assert report["delivered"] == 4 - len(unsure)
