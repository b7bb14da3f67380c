"""wrk as a closed-model engine: POST at a URL (or at one of many counters) for a while, and the
rate it got."""

from __future__ import annotations

import re
import subprocess
import tempfile
from typing import NamedTuple

from bench.errors import BenchError

# Each request takes the next value of a counter drawn uniformly from `names`: the many-counters
# case. Every wrk thread seeds its own generator, so threads do not walk the same sequence.
SPREAD = """
local names = {%s}
local thread_id = 0
function setup(thread)
  thread_id = thread_id + 1
  thread:set("seed", thread_id)
end
function init(args)
  math.randomseed(seed * 7919 + os.time())
end
function request()
  local name = names[math.random(#names)]
  return wrk.format("POST", "/counters/" .. name .. "/next")
end
"""


class Done(NamedTuple):
    """What one wrk run answered: requests in seconds, and its rate."""

    requests: int
    seconds: float
    rate: float


def run(
    url: str,
    connections: int,
    duration: float,
    threads: int = 1,
    counters: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> float:
    """Requests per second wrk got with POSTs to `url` — or, given `counters`, to
    `url`/counters/NAME/next for a name drawn at random per request. BenchError if any answer was
    not 2xx. `headers` go with every request (an API key)."""
    return measure(url, connections, duration, threads, counters, headers).rate


def measure(
    url: str,
    connections: int,
    duration: float,
    threads: int = 1,
    counters: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> Done:
    """`run`, with the requests answered and the seconds they took as wrk counted them."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        for name, value in (headers or {}).items():
            script.write(f'wrk.headers["{name}"] = "{value}"\n')
        if counters:
            script.write(SPREAD % ", ".join(f'"{name}"' for name in counters))
        else:
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
    return parse(out)


def parse(out: str) -> Done:
    """wrk's summary read: `N requests in Ts` and `Requests/sec: R`."""
    done = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)\b", out)
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not done or not match:
        raise BenchError(f"cannot read wrk's output:\n{out}")
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[done.group(3)]
    return Done(int(done.group(1)), float(done.group(2)) * scale, float(match.group(1)))
