"""How long the ledger's reads take over a large period: the completeness report, the export and
the chain verification of one counter with a million values.

    python -m bench.ledger --values 1000000 --per-frame 250 --requesters 50

Writes the audit trail as the batcher does (one plain frame after another, each `--per-frame`
records of one value, from `--requesters` API keys taking turns, so that every record is a run
of its own: the largest detail a frame can have) on a throwaway embedded Postgres, then times
each read as the service makes it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime

from batcher.classify import Live
from batcher.handout import audits, demand
from infra.adapters.postgres import PostgresStore, migrate
from infra.counters import Counter, Reset
from infra.ledger import export, report, voids
from infra.ports import PlainDemand
from infra.run.embedded import ephemeral
from infra.wire import Record


async def run(url: str, values: int, per_frame: int, requesters: int) -> None:
    await migrate(url)
    store = PostgresStore(url)
    counter = Counter("bench-ledger", reset=Reset.YEARLY, retention_days=3650)
    await store.create(counter)
    lease = await store.acquire("bench", "0", "me", ttl=3600)
    assert lease is not None
    now = datetime.now(UTC)
    period, day = counter.period(now), now.date()
    began = time.perf_counter()
    for frame in range(values // per_frame):
        takers = [
            Live(
                Record(f"r{i}", counter.name, who=f"key:{i % requesters:08x}"), counter, period, day
            )
            for i in range(per_frame)
        ]
        wanted = demand(takers)
        klass = counter.keeping(86_400).klass
        rows = audits(takers, (), {counter.name: counter}, 86_400)
        plain = [PlainDemand(n, p, sum(c), counter.start, klass, 0) for (n, p), c in wanted.items()]
        await store.allocate_plain(lease, str(frame + 1), plain, list(rows.values()))
    wrote = time.perf_counter() - began
    size = await store.trail_size()
    print(
        f"wrote {values:,} values in {values // per_frame:,} frames in {wrote:.1f} s: the trail "
        f"takes {size / 2**20:.1f} MiB, {size / values * 1e6 / 2**20:.1f} MiB per million values"
    )

    began = time.perf_counter()
    links, pruned = await store.trail(counter.name)
    made = voids(links, counter.name, period)
    allocated = await store.allocated(counter.name, period)
    found = report(counter, period, allocated, links, made, pruned.get(period))
    took = time.perf_counter() - began
    print(
        f"report: {took:.2f} s (issued {found['issued']:,}, unexplained gaps "
        f"{found['unexplained_gaps']}, rising {found['rising']})"
    )
    began = time.perf_counter()
    rows_out = export(counter.name, period, links, made)
    print(
        f"export: {time.perf_counter() - began + took:.2f} s with its read ({len(rows_out):,} rows)"
    )
    began = time.perf_counter()
    verdict = await store.verify(counter.name)
    took = time.perf_counter() - began
    print(f"verify: {took:.2f} s ({verdict['rows']:,} rows, ok {verdict['ok']})")
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", type=int, default=1_000_000)
    parser.add_argument("--per-frame", type=int, default=250)
    parser.add_argument("--requesters", type=int, default=50)
    args = parser.parse_args()
    with ephemeral() as postgres:
        asyncio.run(run(postgres.url, args.values, args.per_frame, args.requesters))


if __name__ == "__main__":
    main()
