"""The batcher's own cost a frame, without HTTP: the in-process stream fed `--records` records at
a time, each batch answered before the next is put, so that every put is one frame.

    python -m bench.frames --frames 2000 --records 30

On a throwaway embedded Postgres (frame settings such as FRAME_POLICY from the environment), one
batcher on uvloop, as `numerator serve` runs it. Prints the wall time and this process's CPU a
frame (the batcher's reading, classifying, its one statement through psycopg and its pool,
handing out, and publishing, plus the feeding: a record and a wait each), and CPU a record. At
64 connections the frame's path was about a third of a worker's busy main thread
(docs/performance.md): this measures it alone, and an A/B of a change to it is two runs.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass

import uvloop

from batcher.worker import Batcher
from bench import local
from infra.adapters.memory import MemoryReplies, MemoryStream
from infra.adapters.postgres import PostgresStore
from infra.adapters.postgres.pool import migrate
from infra.counters import Counter
from infra.observe.metrics import Metrics
from infra.settings import Settings
from infra.wire import Record, Reply, reply_key

COUNTER = "hot"


@dataclass
class Spent:
    """What feeding `frames` frames of `records` records cost."""

    frames: int
    records: int
    committed: int
    wall_s: float
    cpu_s: float
    values: list[int]

    def lines(self) -> list[str]:
        per = 1000 / self.frames
        return [
            f"{self.frames} frames of {self.records} records, {self.committed} transactions",
            f"wall {self.wall_s * per:.3f} ms a frame, CPU {self.cpu_s * per:.3f} ms a frame, "
            f"{self.cpu_s * 1e6 / (self.frames * self.records):.1f} µs a record",
        ]


async def feed(url: str, frames: int, records: int, settings: Settings) -> Spent:
    """One batcher on the in-process stream: put `records` records, await every reply, again for
    `frames` frames after a warm-up of a tenth as many."""
    await migrate(url)
    store = PostgresStore(url)
    await store.open()
    if await store.get(COUNTER) is None:
        await store.create(Counter(COUNTER))
    stream, replies, metrics = MemoryStream(), MemoryReplies(), Metrics()
    batcher = Batcher(stream, replies, store, settings, metrics)
    await batcher.start()
    try:
        await _frames(stream, replies, max(1, frames // 10), records)
        committed = metrics.frames_committed.value
        cpu, wall = time.process_time(), time.perf_counter()
        values = await _frames(stream, replies, frames, records)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        committed = metrics.frames_committed.value - committed
    finally:
        await batcher.stop()
        await store.close()
    return Spent(frames, records, int(committed), wall, cpu, values)


async def _frames(
    stream: MemoryStream, replies: MemoryReplies, frames: int, records: int
) -> list[int]:
    """Put `frames` batches of `records` one-value records, each answered before the next; the
    values handed out."""
    values: list[int] = []
    for _ in range(frames):
        now = time.time()
        batch = [
            Record(reply_key(), COUNTER, 1, None, now + 30, now, "bench") for _ in range(records)
        ]
        for record in batch:
            replies.expect(record.key)
        await stream.put(batch)
        got: list[Reply] = await asyncio.gather(*(replies.wait(r.key, 30) for r in batch))
        values.extend(reply.first for reply in got if reply.ok)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=2000, help="frames measured")
    parser.add_argument("--records", type=int, default=30, help="records a frame")
    args = parser.parse_args()
    settings = Settings.from_env()
    with local.database() as db:
        spent = uvloop.run(feed(db.url, args.frames, args.records, settings))
    for line in spent.lines():
        print(line)
    handed = spent.values
    if len(handed) != args.frames * args.records or len(set(handed)) != len(handed):
        raise SystemExit(f"{len(handed)} values handed out, {len(set(handed))} distinct")


if __name__ == "__main__":
    main()
