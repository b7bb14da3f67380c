"""Restarts that always work (guarantee 7): `numerator up` SIGKILLed under load — the whole
process tree, or its main process alone — starts again at once on the same port and data
directory, serves within seconds, and never hands a value out twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from infra.run.server import running
from tests.checks import assert_accounted
from tests.e2e.service import Service, data_dir, postgres_of

pytestmark = pytest.mark.slow


class Load:
    """A client that keeps taking values from one thread until stopped; what it was answered."""

    def __init__(self, url: str) -> None:
        self.url, self.values, self.running = url, [], True
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=5) as client:
            while self.running:
                try:
                    response = client.post("/counters/c/next")
                except httpx.HTTPError:
                    time.sleep(0.05)
                    continue
                if response.status_code == 200:
                    self.values.append(response.json()["value"])

    def stop(self) -> list[int]:
        self.running = False
        self.thread.join(10)
        return self.values


def restart(folder: str, port: int) -> tuple[Service, float]:
    began = time.monotonic()
    return Service("--data-dir", folder, port=port), time.monotonic() - began


@pytest.mark.parametrize("what", ["tree", "main"])
def test_sigkill_under_load_then_up_at_once_on_the_same_port(tmp_path: Path, what: str) -> None:
    folder = data_dir(tmp_path)
    first = Service("--data-dir", folder)
    port = first.port
    workers = psutil.Process(first.process.pid).children(recursive=True)
    try:
        assert httpx.post(first.url + "/counters", json={"name": "c"}, timeout=10).status_code
        load = Load(first.url)
        time.sleep(1.5)
        if what == "tree":
            first.crash(tmp_path / "data")
        else:  # the main process alone: its worker must not live on, serving the port
            os.kill(first.process.pid, signal.SIGKILL)
            _, alive = psutil.wait_procs(
                [w for w in workers if "numerator" in " ".join(w.cmdline())], timeout=10
            )
            assert not alive, f"workers outlived their main process: {alive}"
        second, took = restart(folder, port)
        with second:
            time.sleep(1.0)
            values = load.stop()
            assert_accounted(second.url, "c", set(values))
        # the second's exit stops the embedded Postgres, though the killed first was not yet
        # reaped (a zombie) when the second joined it
        postgres = postgres_of(Path(folder))
        _, running = psutil.wait_procs([postgres] if postgres else [], timeout=15)
        assert not running, f"Postgres outlived the last numerator on {folder}: {running}"
    finally:
        first.stop()
    assert took < 20, f"the restart took {took:.1f}s to serve"
    assert len(values) > 50
    assert len(values) == len(set(values)), "a value was handed out twice across the restart"


def test_a_second_up_on_a_held_data_directory_is_refused(tmp_path: Path) -> None:
    folder = data_dir(tmp_path)
    with Service("--data-dir", folder):
        done = subprocess.run(
            [sys.executable, "-m", "numerator", "up", "--data-dir", folder, "--port", "1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert "another numerator (pid" in done.stderr and folder in done.stderr


def test_an_ephemeral_postgres_a_kill_9_left_is_stopped_and_deleted_by_the_next_up() -> None:
    """`up --ephemeral` SIGKILLed (its workers die with it) leaves its Postgres running and its
    folder behind; the next `up --ephemeral` stops that server and deletes the folder."""
    with tempfile.TemporaryDirectory(prefix="n") as temporary:  # short: Postgres's socket path
        env = {"TMPDIR": temporary}  # this test's folders alone
        first = Service("--ephemeral", env=env)
        (folder,) = Path(temporary).glob("numerator-ephemeral-*")
        postgres = postgres_of(folder)
        assert postgres is not None
        os.kill(first.process.pid, signal.SIGKILL)  # as the OOM killer would: `up` alone
        first.process.communicate(timeout=30)
        try:
            time.sleep(1)
            assert running(postgres.pid), "nothing else stops it"
            with Service("--ephemeral", env=env):
                assert not running(postgres.pid) and not folder.exists()
                assert len(list(Path(temporary).glob("numerator-ephemeral-*"))) == 1  # its own
            assert list(Path(temporary).glob("numerator-ephemeral-*")) == []
        finally:
            if running(postgres.pid):  # the test failed: leave no server behind
                postgres.kill()
