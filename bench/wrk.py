"""wrk as a closed-model engine: POST at a URL for a while, and the rate it got."""

from __future__ import annotations

import re
import subprocess
import tempfile

from bench.errors import BenchError


def run(url: str, connections: int, duration: float, threads: int = 1) -> float:
    """Requests per second wrk got with POSTs to `url`; BenchError if any answer was not 2xx."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write('wrk.method = "POST"\n')
        script.flush()
        command = [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{duration:g}s",
            "-s",
            script.name,
            url,
        ]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise BenchError(f"wrk saw {errors.group(1)} failed responses:\n{out}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not match:
        raise BenchError(f"cannot read wrk's output:\n{out}")
    return float(match.group(1))
