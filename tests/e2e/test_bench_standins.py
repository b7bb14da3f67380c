"""`python -m bench.standins`: numerator served with its frame's statement and with stand-ins
for it, driven in turn by wrk (Debian's `wrk`): each round's shares and their medians. A run of
the tool, not a measurement: nothing here is timed."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.tools import debian_tool

pytestmark = pytest.mark.slow


def test_standins_serve_each_kind_and_give_each_its_share_of_ping() -> None:
    debian_tool("wrk", "wrk")
    kinds = ["none", "row", "statement"]
    command = ["--kinds", ",".join(kinds), "--rounds", "2", "--connections", "8"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.standins", *command, "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rounds = re.findall(r"^\s+(\d+)\s+8\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", done.stdout, re.M)
    assert [r[0] for r in rounds] == ["1", "2"], done.stdout
    assert all(float(share) > 0 for r in rounds for share in r[1:]), done.stdout
    for kind in kinds:
        assert re.search(
            rf"^\s+8\s+{kind}: next/ping median [\d.]+, range [\d.]+-[\d.]+$", done.stdout, re.M
        ), done.stdout


def test_a_stand_in_it_does_not_know_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.standins", "--kinds", "none,nothing"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "no such stand-in: nothing" in done.stderr
