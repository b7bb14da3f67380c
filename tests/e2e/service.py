"""Run `numerator up` as a user would: a child process, a free port, Ctrl-C to stop it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from infra.errors import NumeratorError
from infra.run.embedded import pid_in
from infra.run.process import wait_ready
from infra.run.server import free_port


class Service:
    def __init__(
        self, *args: str, env: dict[str, str] | None = None, port: int = 0, command: str = "up"
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environment = {**os.environ, **(env or {})}
        if "--database-url" not in args:
            environment.pop("DATABASE_URL", None)  # the embedded default, as a user gets it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "numerator", command, "--port", str(self.port), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment,
            start_new_session=True,  # so that crash() can kill the whole tree at once
        )
        self.output = ""
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        try:
            wait_ready(self.process, self.url + "/healthz", "numerator up", patience=timeout)
        except NumeratorError as exc:
            self.stop()
            raise AssertionError(f"{exc}:\n{self.output}") from None

    def said(self) -> str:
        """What the service has printed so far, without waiting for it to end."""
        stdout = self.process.stdout
        assert stdout is not None
        while select.select([stdout], [], [], 0)[0]:
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                break
            self.output += chunk.decode(errors="replace")
        return self.output

    def stop(self) -> int:
        """Ctrl-C, as a person would; return the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            out, _ = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # every process it started, which hold its output
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            out, _ = self.process.communicate()
            out += "\n[the test harness: no exit 30 s after Ctrl-C; SIGKILLed its process group]"
        self.output += out
        return self.process.returncode

    def crash(self, data_dir: Path | None = None) -> None:
        """SIGKILL to the service and every process it started — workers, and with --aws its
        batchers and moto server (each in a session of its own) — and to the embedded Postgres
        whose files are in `data_dir` when given."""
        if data_dir is not None:
            postgres = postgres_of(data_dir)
            assert postgres is not None, f"no Postgres runs on {data_dir}"
            postgres.kill()
        for child in psutil.Process(self.process.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        os.killpg(self.process.pid, signal.SIGKILL)
        out, _ = self.process.communicate(timeout=30)
        self.output += out

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def numerator(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "numerator", *args, "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )


def postgres_of(data_dir: Path) -> psutil.Process | None:
    """The embedded Postgres serving `data_dir` (numerator up's --data-dir), if one runs: the
    postmaster its pid file names."""
    pid = pid_in(data_dir / "pgdata" / "postmaster.pid")
    try:
        return psutil.Process(pid) if pid is not None else None
    except psutil.NoSuchProcess:
        return None


def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "data")


class BatcherProcess:
    """A `numerator batcher` process, its output in a file."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port, self.log = free_port(), log
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "numerator", "batcher", "--port", str(self.port)],
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def metric(self, name: str) -> float:
        text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))

    async def ready(self) -> None:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(timeout=1) as client:
            while time.monotonic() < deadline:
                assert self.process.poll() is None, self.log.read_text()
                try:
                    if (await client.get(f"http://127.0.0.1:{self.port}/healthz")).is_success:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        raise AssertionError(f"the batcher did not start: {self.log.read_text()}")

    async def said(self, text: str, within: float) -> None:
        deadline = time.monotonic() + within
        while text not in self.log.read_text():
            assert time.monotonic() < deadline, f"the batcher never said {text!r}"
            await asyncio.sleep(0.02)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


def child(service: Service, marker: str) -> psutil.Process:
    """The process `up` started whose command line holds `marker`."""
    for process in psutil.Process(service.process.pid).children(recursive=True):
        if marker in " ".join(process.cmdline()):
            return process
    raise AssertionError(f"no child of up runs {marker!r}")


def wait_for(check: object, within: float, what: str) -> float:
    began = time.monotonic()
    while time.monotonic() - began < within:
        if check():  # type: ignore[operator]
            return time.monotonic() - began
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {within} s")
