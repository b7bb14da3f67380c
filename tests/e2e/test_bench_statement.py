"""`python -m bench.statement`: a plain frame's statement and its parts, timed in Postgres. A run of
the tool, not a measurement: nothing here is timed, but what it ran is checked — the tool itself
fails unless every timed addition reached the counter and every timed frame wrote its audit row."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

PARTS = (
    "a round trip (SELECT 1)",
    "the fence (the lease's checkpoint)",
    "the addition (the counter's row)",
    "the frame without its audit row",
    "the frame (PLAIN)",
)


def test_each_part_is_timed_with_and_without_the_commits_flush() -> None:
    small = ("--statements", "5", "--rounds", "2", "--warm", "10")
    done = subprocess.run(
        [sys.executable, "-m", "bench.statement", *small],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for part in PARTS:
        found = re.search(re.escape(part) + r" +([\d.]+) +([\d.]+)$", done.stdout, re.M)
        assert found, (part, done.stdout)
        assert float(found[1]) > 0 and float(found[2]) > 0, found[0]
    summary = r"the audit row adds -?[\d.]+ ms; the commit's flush -?[\d.]+ ms; a round trip is "
    assert re.search(summary + r"[\d.]+ ms", done.stdout), done.stdout
