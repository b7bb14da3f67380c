"""`python -m bench.yardstick`: /next on one hot counter against the bare ASGI app on the same
server, one short round, and the ratios it prints and records. A run of the tool, not a
measurement: nothing here is timed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools import debian_tool

pytestmark = pytest.mark.slow


def test_one_round_prints_the_ratios_and_writes_the_record(tmp_path: Path) -> None:
    debian_tool("wrk", "wrk")
    kept = tmp_path / "yardstick.json"
    command = ["--rounds", "1", "--duration", "1", "--connections", "16", "--json", str(kept)]
    command.append("--floor")
    done = subprocess.run(
        [sys.executable, "-m", "bench.yardstick", *command],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figure = r"[\d.]+ \([\d.]+-[\d.]+\)"
    assert re.search(rf"^\s+16\s+1\s+{figure}\s+{figure}\s+{figure}$", done.stdout, re.M), (
        done.stdout
    )
    for app in ("bare", "next", "floor"):
        assert re.search(rf"^\s+1\s+16\s+{app}\s+[\d,]+\s+[\d.]+\s+[\d.]+$", done.stdout, re.M)
    made = json.loads(kept.read_text())
    ratios = made["summary"]["16"]["ratios"]
    assert set(ratios) == {"service", "total", "rate"}
    assert all(spread["median"] > 0 for spread in ratios.values())
    assert {s["app"] for s in made["samples"]} == {"bare", "next", "floor"}
    assert "/next ÷ floor (/batched)" in done.stdout
    assert made["summary"]["16"]["over_floor"]["service"]["median"] > 0
