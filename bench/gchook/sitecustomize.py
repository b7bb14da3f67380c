"""Put on PYTHONPATH by bench.gcpause only: times every garbage collection of every Python
process started with GCPAUSE_DIR set, a line a collection in GCPAUSE_DIR/<pid> (wall time at its
end, generation, seconds it took, objects it collected). Not product code."""

import gc
import os
import time
from typing import Any

WHERE = os.environ.get("GCPAUSE_DIR", "")
began = [0.0]


def timed(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        began[0] = time.perf_counter()
        return
    took = time.perf_counter() - began[0]  # the write below comes after the collection's end
    with open(os.path.join(WHERE, str(os.getpid())), "a") as out:
        out.write(f"{time.time():.6f} {info['generation']} {took:.6f} {info['collected']}\n")


if WHERE:
    gc.callbacks.append(timed)
