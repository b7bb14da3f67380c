"""The AWS path on one machine (`numerator up --aws moto|URL`): the endpoint, its resources, and
batcher processes beside the HTTP edge."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import httpx

from infra.errors import NumeratorError
from infra.server import die_with_parent, free_port

MOTO_MISSING = (
    "--aws moto needs moto server, which is not installed: "
    "pip install 'numerator[aws-local]' (from a clone: pip install -e '.[aws-local]')"
)


def aws_environment(endpoint: str) -> dict[str, str]:
    """What the edge and batchers need to reach `endpoint`: the endpoint, and a region and
    credentials when none are set (moto and LocalStack take any)."""
    return {
        "MODE": "aws",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION")
        or os.environ.get("AWS_REGION")
        or "us-east-1",
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID") or "test",
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY") or "test",
    }


def require_moto() -> None:
    """Say what to install, before anything starts, when moto server is not there."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        raise NumeratorError(MOTO_MISSING) from None


@contextmanager
def moto_server() -> Iterator[str]:
    """moto server on a free loopback port, in its own process (it is CPU-bound, and must not
    share a GIL with the edge), one request at a time (`numerator.motoserver`): its URL."""
    require_moto()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "numerator.motoserver", "-H", "127.0.0.1", "-p", str(port)]
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
            start_new_session=True,  # Ctrl-C reaches `up`, which stops the parts in order
            text=True,
        )
        try:
            _wait(url + "/moto-api/", process, log, "moto server")
            yield url
        finally:
            _stop(process, signal.SIGTERM, 10)


@contextmanager
def batchers(count: int, env: dict[str, str]) -> Iterator[list[str]]:
    """`count` batcher processes; their /healthz URLs once each answers. SIGTERM at the end, so
    each finishes its frame, publishes and releases its leases."""
    processes: list[tuple[subprocess.Popen[str], str]] = []
    try:
        for _ in range(count):
            port = free_port()
            command = [sys.executable, "-m", "numerator", "batcher", "--port", str(port)]
            process = subprocess.Popen(
                command,
                env={**os.environ, **env},
                preexec_fn=die_with_parent,
                start_new_session=True,  # stopped by `up` after the edge, before moto
                text=True,
            )
            processes.append((process, f"http://127.0.0.1:{port}"))
        for process, url in processes:
            _wait(url + "/healthz", process, None, "the batcher")
        yield [url for _, url in processes]
    finally:
        for process, _ in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, _ in processes:
            _stop(process, signal.SIGTERM, 30)


def _wait(url: str, process: subprocess.Popen[str], log: IO[str] | None, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = ""
            if log is not None:
                log.seek(0)
                said = ": " + log.read()[-2000:]
            raise NumeratorError(f"{what} exited with status {process.returncode}{said}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise NumeratorError(f"{what} did not answer at {url} within 60 s")


def _stop(process: subprocess.Popen[str], signum: int, patience: float) -> None:
    if process.poll() is None:
        process.send_signal(signum)
    try:
        process.wait(patience)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
