"""`python -m bench.wrk_next --baselines`: numerator and both baselines served at once on one
Postgres, driven in turn by wrk (Debian's `wrk`), each round's rates and numerator's multiples,
then their medians. A run of the tool, not a measurement: nothing here is timed."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.tools import debian_tool

pytestmark = pytest.mark.slow


def test_baselines_drives_numerator_and_both_baselines_in_turn_and_gives_their_multiples() -> None:
    debian_tool("wrk", "wrk")
    command = ["--baselines", "2", "--connections", "8", "--duration", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.wrk_next", *command],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rounds = re.findall(
        r"^\s+(\d+)\s+8\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)x sequence, ([\d.]+)x rowlock$",
        done.stdout,
        re.MULTILINE,
    )
    assert [r[0] for r in rounds] == ["1", "2"], done.stdout
    for _, numerator, sequence, rowlock, by_sequence, by_rowlock in rounds:
        rates = [float(x.replace(",", "")) for x in (numerator, sequence, rowlock)]
        assert all(rate > 0 for rate in rates), done.stdout
        # each multiple is numerator's rate over that baseline's, as printed (to rounding)
        assert float(by_sequence) == pytest.approx(rates[0] / rates[1], abs=0.01)
        assert float(by_rowlock) == pytest.approx(rates[0] / rates[2], abs=0.01)
    for name in ("sequence", "rowlock"):
        assert re.search(
            rf"^\s+8 numerator / {name}: median [\d.]+x, mean [\d.]+x, range [\d.]+-[\d.]+$",
            done.stdout,
            re.MULTILINE,
        ), done.stdout
