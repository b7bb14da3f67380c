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
from tests.e2e.service import Service, child, data_dir, wait_for

pytestmark = pytest.mark.slow

CLIENTS = 24


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


def test_after_a_worker_is_killed_under_load_unsure_is_tight_and_covers_every_lost_value() -> None:
    """Issue 28, finding 5: SIGKILL a worker while clients take values as fast as they can. The
    values no client received are all listed unsure (or void), and the unsure ones are no more
    than the requests in flight (one per client) and 0.3 s of the traffic's values (it was 4 s'
    worth: 4,205 at ~1,000 values/s)."""
    import asyncio

    received: list[tuple[float, int]] = []  # (when, value)

    async def client(url: str, until: float) -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            while time.monotonic() < until:
                try:
                    answer = await http.post(url)
                except httpx.HTTPError:  # the killed worker's connections
                    await asyncio.sleep(0.05)
                    continue
                if answer.status_code == 200:
                    received.append((time.monotonic(), answer.json()["value"]))

    async def load(url: str, seconds: float) -> None:
        until = time.monotonic() + seconds
        await asyncio.gather(*(client(url, until) for _ in range(CLIENTS)))

    with Service("--ephemeral") as service:
        assert httpx.post(service.url + "/counters", json={"name": "t"}, timeout=30).is_success
        worker = next(
            p
            for p in psutil.Process(service.process.pid).children()
            if p.cmdline() == psutil.Process(service.process.pid).cmdline()
        )
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(asyncio.run, load(service.url + "/counters/t/next", 5.0))
            time.sleep(3.0)
            killed = time.monotonic()
            worker.send_signal(signal.SIGKILL)
            running.result(60)
        deadline = time.monotonic() + EDGE_DEAD_S + 15
        while True:
            report = httpx.get(service.url + "/counters/t/report", timeout=30).json()
            if report["unsure"] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    got = {value for _, value in received}
    assert len(got) == len(received), "no value twice"
    before = [when for when, _ in received if killed - 1.0 <= when < killed]
    rate = len(before)  # values a second, in the second before the kill
    unsure = {v for run in report["unsure_runs"] for v in range(run["first"], run["last"] + 1)}
    void = {v for run in report["voids"] for v in range(run["first"], run["last"] + 1)}
    lost = set(range(report["first"], report["last"] + 1)) - got - void
    print(f"{rate} values/s before the kill; {len(lost)} not received; unsure {len(unsure)}")
    assert lost <= unsure, f"not received and not unsure: {sorted(lost - unsure)[:20]}"
    assert report["unexplained_gaps"] == 0
    assert rate >= 50, "too few values a second to measure by (a busy machine?)"
    assert len(unsure) <= CLIENTS + 0.3 * rate, (len(unsure), rate)
