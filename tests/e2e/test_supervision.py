"""Health tells the truth on the AWS path, and `up` supervises what it started: a SIGKILLed
batcher is started again (and takes its shards back at once), a SIGKILLed moto server stops
`up` with a non-zero status naming it, and an endpoint `up` did not start that dies turns
/healthz red (the edge's and the batcher's) while /next answers clean 503s or 504s."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest

from numerator.local import moto_server
from tests.e2e.service import Service, child, wait_for

pytestmark = pytest.mark.slow


def next_value(service: Service, counter: str) -> int:
    answer = httpx.post(f"{service.url}/counters/{counter}/next", timeout=30)
    assert answer.status_code == 200, answer.text
    value: int = answer.json()["value"]
    return value


def test_up_starts_a_killed_batcher_again_and_it_takes_its_shard_back_at_once(
    tmp_path: Path,
) -> None:
    with Service("--aws", "moto", "--ephemeral") as service:
        assert httpx.post(service.url + "/counters", json={"name": "s"}, timeout=30).is_success
        assert next_value(service, "s") == 1
        first = child(service, "numerator batcher")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        took = wait_for(lambda: "starting it again" in service.said(), 10, "a restart")
        values = [next_value(service, "s") for _ in range(5)]  # each within REPLY_TIMEOUT_S
        again = child(service, "numerator batcher")
        health = httpx.get(service.url + "/healthz", timeout=10)
    assert again.pid != first.pid
    assert values == [2, 3, 4, 5, 6], "no value lost or repeated across the restart"
    assert health.status_code == 200, health.text
    print(f"the restart was logged {took:.1f} s after the kill")
    assert re.search(
        r"batcher 1 \(pid \d+\) exited with status -9; starting it again", service.output
    )


def test_up_stops_naming_moto_server_when_it_dies(tmp_path: Path) -> None:
    service = Service("--aws", "moto", "--ephemeral")
    try:
        child(service, "numerator.motoserver").send_signal(signal.SIGKILL)
        service.process.wait(30)
    finally:
        code = service.stop()
    assert code == 1, service.output
    assert (
        "stopped: moto server (pid" in service.output and "exited with status -9" in service.output
    )
    assert not [
        p for p in psutil.Process().children(recursive=True) if "numerator" in " ".join(p.cmdline())
    ]


def test_an_endpoint_that_dies_turns_health_red_and_next_answers_cleanly(tmp_path: Path) -> None:
    """`up --aws URL` on an endpoint it did not start (LocalStack, say): when it dies, `up`
    stays (the endpoint may come back), /healthz goes 503 within seconds naming the stream
    and the reply table, on the edge and on the batcher, and /next answers 503 or 504."""
    with moto_server() as moto, Service("--aws", moto.url, "--ephemeral") as service:
        assert httpx.post(service.url + "/counters", json={"name": "e"}, timeout=30).is_success
        assert next_value(service, "e") == 1
        batcher = re.search(r"1 batcher\(s\) \((http://[0-9.:]+)\)", service.said())
        assert batcher is not None, service.output
        moto.process.send_signal(signal.SIGKILL)
        moto.process.wait(10)
        killed = time.monotonic()
        took = wait_for(
            lambda: httpx.get(service.url + "/healthz", timeout=5).status_code == 503, 10, "red"
        )
        health = httpx.get(service.url + "/healthz", timeout=5).json()
        answer = httpx.post(service.url + "/counters/e/next", timeout=30)
        answered = time.monotonic() - killed
        red = wait_for(
            lambda: httpx.get(batcher.group(1) + "/healthz", timeout=5).status_code == 503,
            10,
            "the batcher's health",
        )
        said = httpx.get(batcher.group(1) + "/healthz", timeout=5).json()
        assert service.process.poll() is None, "up stays: it did not start the endpoint"
    print(f"edge /healthz red {took:.1f} s after the kill; batcher's {red:.1f} s after that")
    assert health["stream"].startswith("down") and health["replies"].startswith("down"), health
    assert answer.status_code in (503, 504), answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answered < 30
    assert said["status"] == "degraded", said
    assert said["stream"].startswith("down") and said["replies"].startswith("down"), said


def workers_of(service: Service) -> list[psutil.Process]:
    """The granian workers serving `service`: forks of its main process (batchers and moto
    server are children of their own command lines)."""
    main = psutil.Process(service.process.pid)
    return [p for p in main.children() if p.cmdline() == main.cmdline()]


@pytest.mark.parametrize("path", [(), ("--aws", "moto"), ("--aws", "moto", "--edge", "lambda")])
def test_a_killed_worker_is_started_again_while_the_other_serves(path: tuple[str, ...]) -> None:
    """Guarantee 7: SIGKILL one of two workers; `up` and the other worker keep serving, a new
    worker takes the dead one's place; no value is repeated or out of order across it."""
    with Service(*path, "--ephemeral", "--workers", "2") as service:
        assert httpx.post(service.url + "/counters", json={"name": "w"}, timeout=30).is_success
        before = [next_value(service, "w") for _ in range(4)]
        victim, survivor = workers_of(service)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        during = [next_value(service, "w") for _ in range(4)]  # the survivor answers
        wait_for(lambda: len(workers_of(service)) == 2, 20, "a new worker")
        assert survivor.is_running() and service.process.poll() is None
        after = [next_value(service, "w") for _ in range(20)]
        health = httpx.get(service.url + "/healthz", timeout=10)
        assert health.status_code == 200, health.text
    values = before + during + after
    assert len(set(values)) == len(values) and values == sorted(values), values
    assert "Respawning worker" in service.output
