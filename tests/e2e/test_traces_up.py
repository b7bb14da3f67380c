"""docs/operations.md's traces block, run as written: `numerator up --trace FILE` (its HTTP worker
a process of its own, appending to the file), a few /next, then `python -m bench.waterfall FILE
--svg OUT` printing and drawing one request's hops, its batcher's frame found through the link."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from bench import waterfall
from tests.e2e.service import Service

pytestmark = pytest.mark.slow  # starts `numerator up`: 5-10 s

PAGE = Path(__file__).parents[2] / "docs" / "operations.md"


def block() -> list[list[str]]:
    """The traces section's first `sh` block: its commands, each as its words."""
    section = PAGE.read_text().split("## Traces", 1)[1]
    found = re.search(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert found is not None
    return [shlex.split(line.split("#")[0]) for line in found.group(1).strip().splitlines()]


def test_the_operations_pages_trace_block_as_written(tmp_path: Path) -> None:
    up, draw = block()
    assert up[:2] == ["numerator", "up"] and "--trace" in up
    assert draw[:3] == ["python", "-m", "bench.waterfall"]
    here = {"traces.jsonl": str(tmp_path / "traces.jsonl"), "next.svg": str(tmp_path / "n.svg")}
    with Service(*(here.get(word, word) for word in up[2:])) as service:
        assert str(tmp_path / "traces.jsonl") in service.said()  # `up` says where they go
        made = httpx.post(f"{service.url}/counters", json={"name": "inv"}, timeout=10)
        assert made.status_code == 201
        for _ in range(3):
            answer = httpx.post(f"{service.url}/counters/inv/next", timeout=10)
            assert answer.status_code == 200
        time.sleep(1.5)  # the file is appended to every half second
    done = subprocess.run(
        [sys.executable, *(here.get(word, word) for word in draw[1:])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    printed = {line.split()[0] for line in done.stdout.splitlines()}
    assert {"POST", "put", "reply", "frame", "read", "commit", "publish"} <= printed, done.stdout
    assert (tmp_path / "n.svg").read_text().startswith("<svg")
    spans = waterfall.read(tmp_path / "traces.jsonl")
    assert sum(s["name"] == waterfall.NEXT for s in spans) == 3
    assert {s["service"] for s in spans} == {"numerator-edge+batcher"}
