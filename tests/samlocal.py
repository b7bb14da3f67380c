"""What the `sam local` tests stand on: a Docker daemon (waited for; in CI its absence fails),
and the machinery of `numerator sam-local` itself (numerator.samlocal, numerator.samstack): the
stand-in image, `sam build`, `numerator up --aws moto` relayed to the Docker bridge with the
database secret and the --env-vars file, `sam local start-api`. The tests run the package's
code, not a copy of it.

Time, measured on the 2-core machine shared with other runs (load average 5-8): the docs test
(docs/deploy.md's blocks and every events/ file, three `sam local invoke` at a time) 232 s, the
other three with their `sam build` 187 s; each `sam local invoke` is a container of its own,
13-40 s, most of it SAM CLI's start."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from infra.run.server import free_port
from numerator import samlocal


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def docker_daemon(patience: float = 90.0) -> None:
    """Return once a Docker daemon answers (.ci/run starts one in the background); otherwise
    skip, saying why, or in CI fail."""
    deadline = time.monotonic() + patience
    while True:
        if shutil.which("docker"):
            done = subprocess.run(["docker", "info"], capture_output=True, check=False)
            if done.returncode == 0:
                return
        if time.monotonic() > deadline or not (in_ci() or shutil.which("dockerd")):
            break
        time.sleep(2)
    why = "sam local needs a Docker daemon and none answers (docs/deploy.md: how to start one)"
    if in_ci():
        pytest.fail(why)
    pytest.skip(why)


@contextmanager
def start_api(template: Path, env_vars: Path | None, log: Path, *overrides: str) -> Iterator[str]:
    """`sam local start-api` (numerator.samlocal.start_api) on a free port; its URL. Afterwards,
    its warnings and errors printed."""
    try:
        with samlocal.start_api(template, env_vars, free_port(), log, *overrides) as (url, _):
            yield url
    finally:
        lines = log.read_text().splitlines() if log.exists() else []
        said = [line for line in lines if WARNED.search(line)]
        print(f"sam local start-api: {len(said)} warning/error line(s)", *said[-20:], sep="\n")


WARNED = re.compile(r"WARNING\"|ERROR|Error|Traceback")
