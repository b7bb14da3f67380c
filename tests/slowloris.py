"""`python -m tests.slowloris PORT N SECONDS`: hold N connections to 127.0.0.1:PORT that never
finish their request head, for SECONDS; a connection the server closes is opened again at
once. Prints `held N` when all N are open, and the opened and closed totals at the end.

It runs at the lowest CPU priority: an attacker's CPU is not the service's, and on a two-core
machine that also runs the service, Postgres and the load generator, its 3,000 reconnects every
HEADER_TIMEOUT_S would otherwise be measured as the service's latency."""

from __future__ import annotations

import asyncio
import os
import resource
import sys

HEAD = b"POST /counters/hot/next HTTP/1.1\r\nHost: numerator\r\n"  # no blank line: never ends


def allow_files(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        top = wanted if hard == resource.RLIM_INFINITY else max(hard, wanted)
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, top))  # raising hard needs root


async def hold(port: int, count: int, seconds: float) -> tuple[int, int]:
    opened = closed = 0
    up = asyncio.Event()

    async def one() -> None:
        nonlocal opened, closed
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            opened += 1
            if opened == count:
                up.set()
            writer.write(HEAD)
            await reader.read()  # until the server gives up on it
            closed += 1
            writer.close()

    tasks = [asyncio.create_task(one()) for _ in range(count)]
    await asyncio.wait_for(up.wait(), 60)
    print(f"held {count}", flush=True)
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return opened, closed


def main() -> None:
    port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    allow_files(count + 256)
    os.nice(19)
    opened, closed = asyncio.run(hold(port, count, seconds))
    print(f"opened {opened} closed {closed}", flush=True)


if __name__ == "__main__":
    main()
