"""The metrics of a server's worker processes, as one.

With `--workers N` each worker is a process with a registry of its own, and a scrape of /metrics
reaches one of them: its counters alone, which jump up and down from scrape to scrape. So the
server's main process makes a directory for its workers (`WORKERS_DIR` in their environment).
Each worker writes its metrics there, `<pid>.json`, every WRITE_EVERY_S and whenever it answers a
scrape, and a scrape adds every worker's file up. The worker that answers writes its own first, so
a total never goes down from one scrape to the next, whichever workers the two reach; another
worker's part is at most WRITE_EVERY_S old. A worker that is gone keeps what it counted, not what
it held (its gauges).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import orjson

from infra.observe.metrics import Metrics
from infra.run.server import WORKERS_DIR, running

WRITE_EVERY_S = 0.5


class Workers:
    """This worker's part of the directory, and the sum of every worker's."""

    def __init__(self, directory: Path, metrics: Callable[[], Metrics]) -> None:
        self.directory, self.metrics = directory, metrics
        self.own = directory / f"{os.getpid()}.json"

    def write(self) -> None:
        written = self.own.with_suffix(".part")
        written.write_bytes(orjson.dumps(self.metrics().state()))
        os.replace(written, self.own)  # a reader sees the old file or the new, never half

    def total(self) -> Metrics:
        """Every worker's metrics added up, this one's as they are now."""
        self.write()
        found = []
        for path in sorted(self.directory.glob("*.json")):
            if not path.stem.isdigit():  # not a worker's
                continue
            try:
                state = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):  # gone since the listing
                continue
            found.append(Metrics.from_state(state, gauges=running(int(path.stem))))
        return Metrics.total(found)


@asynccontextmanager
async def sharing(directory: Path, metrics: Callable[[], Metrics]) -> AsyncIterator[Workers]:
    """This worker's part, written every WRITE_EVERY_S while the block runs and once more at its
    end (what it counted to the end stays in the total)."""
    workers = Workers(directory, metrics)
    workers.write()

    async def keep_writing() -> None:
        while True:
            await asyncio.sleep(WRITE_EVERY_S)
            with contextlib.suppress(OSError):  # a full disk: the next write, or a scrape's, says
                workers.write()

    task = asyncio.get_running_loop().create_task(keep_writing())
    try:
        yield workers
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(OSError):
            workers.write()


def workers_dir() -> Path | None:
    """The directory the main process made for its workers' metrics, in a worker; None with one
    worker (or outside a server)."""
    given = os.environ.get(WORKERS_DIR)
    return Path(given) if given else None
