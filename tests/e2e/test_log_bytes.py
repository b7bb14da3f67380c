"""Bytes logged a request that works, as `numerator plan --measure-logs` counts them: none on
either edge. The Lambda edge through its real entry point with logging as Lambda's runtime sets
it for template.yaml (application logs at INFO: Mangum's access line would show), the server edge
as `numerator up --aws moto` serves it. Each probe also counts an EMF line, so a probe that
counted nothing at all cannot pass."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

pytestmark = pytest.mark.slow


def probe(which: str) -> dict[str, float]:
    argv = [sys.executable, "-m", "numerator.plan.logprobe", which, "20"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"log_bytes"')]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    found: dict[str, float] = orjson.loads(lines[-1])["log_bytes"]
    return found


def test_the_lambda_edge_and_the_atomic_counter_log_nothing_for_a_request_that_works() -> None:
    found = probe("lambda")
    assert found["lambda"] == 0 and found["atomic"] == 0, found
    assert found["lambda_emf_line"] > 100  # the container's one line, when it is due


def test_the_server_edge_logs_nothing_for_a_request_that_works() -> None:
    found = probe("server")
    assert found["server"] == 0, found
    assert found["server_emf_line"] > 100  # the worker's line as it stops
    assert found["response_bytes"] > 100  # a /next answer: status line, headers, body
