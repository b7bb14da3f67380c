"""`python -m bench.frames`: the batcher's cost a frame without HTTP. A run of the tool, not a
measurement: nothing here is timed, but what it ran is checked — every put one frame, every value
handed out once."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_every_put_is_one_frame_and_every_value_is_handed_out_once() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.frames", "--frames", "40", "--records", "7"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]  # it checks the values itself
    assert "40 frames of 7 records, 40 transactions" in done.stdout, done.stdout
    found = re.search(
        r"wall ([\d.]+) ms a frame, CPU ([\d.]+) ms a frame, ([\d.]+) µs a record", done.stdout
    )
    assert found, done.stdout
    cpu_ms, per_record_us = float(found[2]), float(found[3])
    assert per_record_us == pytest.approx(cpu_ms * 1000 / 7, rel=0.01)
