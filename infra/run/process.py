"""Child processes: start one, wait until it answers, stop it. The one runner behind `up --aws`
(moto server, batchers), the bench's targets and the end-to-end tests' service."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx

from infra.errors import NumeratorError

Process = subprocess.Popen[Any]

RUNTIME = "3.12"  # template.yaml's Runtime: python3.12


def stand_in_aws(env: dict[str, str] | None = None) -> dict[str, str]:
    """A region and credentials for a child that talks to a stand-in for AWS (moto server,
    LocalStack: they take any), keeping those `env` (default: this process's) sets."""
    env = dict(os.environ) if env is None else env
    return {
        "AWS_DEFAULT_REGION": env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or "us-east-1",
        "AWS_ACCESS_KEY_ID": env.get("AWS_ACCESS_KEY_ID") or "test",
        "AWS_SECRET_ACCESS_KEY": env.get("AWS_SECRET_ACCESS_KEY") or "test",
    }


def aws_init_env(endpoint: str | None, env: dict[str, str] | None = None) -> dict[str, str]:
    """What `numerator aws init` talks to: at an endpoint (`endpoint`, else AWS_ENDPOINT_URL:
    moto server or LocalStack), that endpoint with a stand-in's region and credentials where
    `env` (default: this process's) sets none, as docs/aws.md runs it; without one, AWS itself,
    with the region and credentials boto3 finds."""
    env = dict(os.environ) if env is None else env
    endpoint = endpoint or env.get("AWS_ENDPOINT_URL")
    return {"AWS_ENDPOINT_URL": endpoint, **stand_in_aws(env)} if endpoint else {}


def runtime_python() -> Path | None:
    """The Lambda runtime's Python (3.12) on this machine: pyenv's, else one on PATH that is not
    a pyenv shim (a shim answers only for the versions pyenv has selected)."""
    versions = os.path.expanduser(f"~/.pyenv/versions/{RUNTIME}*/bin/python{RUNTIME}")
    pyenv = sorted(glob.glob(versions))
    if pyenv:
        return Path(pyenv[-1])
    found = shutil.which(f"python{RUNTIME}")
    return Path(found) if found and "shims" not in found else None


def wait_ready(
    process: Process,
    url: str,
    what: str,
    log: IO[str] | None = None,
    ready: Callable[[int], bool] = lambda status: status == 200,
    patience: float = 60.0,
) -> None:
    """Return once `url` answers with a status `ready` accepts; raise NumeratorError, with the
    end of `log`, if the process exits first or `patience` seconds pass."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = ""
            if log is not None:
                log.seek(0)
                said = ": " + log.read()[-2000:]
            raise NumeratorError(f"{what} exited with status {process.returncode}{said}")
        try:
            if ready(httpx.get(url, timeout=1).status_code):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise NumeratorError(f"{what} did not answer at {url} within {patience:g} s")


def stop(process: Process, signum: int = signal.SIGTERM, patience: float = 10.0) -> None:
    """Send `signum` (a clean stop), then SIGKILL after `patience` seconds."""
    if process.poll() is None:
        process.send_signal(signum)
    try:
        process.wait(patience)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def started(
    command: list[str],
    env: dict[str, str],
    url: str,
    what: str,
    signum: int = signal.SIGINT,
    patience: float = 30.0,
    cwd: str | None = None,
) -> Iterator[tuple[Process, IO[str]]]:
    """`command` started (in `cwd`) with its output in a temporary file, yielded (with that
    file) once `url` answers 200; stopped with `signum`, and killed after `patience` seconds."""
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
        try:
            wait_ready(process, url, what, log)
            yield process, log
        finally:
            stop(process, signum, patience)
