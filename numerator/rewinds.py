"""`numerator counters rewinds` and `numerator counters mend`: the counters a batcher found below
values it had handed out (a failover to a standby that lacked the primary's last commits), and
the operator's mend that raises one past them, so that it is served again (docs/runbook.md).
Straight on Postgres (--database-url or DATABASE_URL): the service refuses those counters."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime

from infra.errors import Refused
from infra.ports import Mend, Rewind
from numerator import console
from numerator.serving import settings_of


def run_rewinds(args: argparse.Namespace) -> None:
    found = asyncio.run(_rewinds(_url(args)))
    body = [
        {"counter": w.counter, "period": w.period, "held": w.held, "last": w.last,
         "detected_at": w.detected_at.isoformat()}
        for w in found
    ]  # fmt: skip
    lines = [
        f"{w.counter} period {w.period!r}: handed out up to {w.held}, Postgres says {w.last} "
        f"(since {w.detected_at:%Y-%m-%d %H:%M:%S}); mend: numerator counters mend {w.counter}"
        for w in found
    ]
    console.show({"rewinds": body}, args.json, lines or ["no counter is rewound"])


def run_mend(args: argparse.Namespace) -> None:
    if (args.name is None) == (not args.all):
        raise Refused("name one counter, or give --all (every rewound counter)")
    url = _url(args)
    if args.all:
        names = sorted({w.counter for w in asyncio.run(_rewinds(url))})
        if not names:
            print("no counter is rewound")
            return
    else:
        names = [args.name]
    mended = [m for name in names for m in asyncio.run(_mend(url, name, args.period, args.past))]
    lines = []
    for m in mended:
        said = f"{m.counter} period {m.period!r}: last value {m.before} -> {m.after}"
        if m.held is None:
            said += " (no rewind was recorded; raised to --past)"
        elif m.after > m.before:
            said += (
                f"; values {m.before + 1} to {m.held} were handed out before the failover and "
                "are not in the ledger (the report names them an unexplained gap)"
            )
        lines.append(said)
    body = [vars(m) for m in mended]
    console.show({"mended": body}, args.json, lines)


def _url(args: argparse.Namespace) -> str:
    url = settings_of(args).database.database_url
    if not url:
        raise Refused("give --database-url or set DATABASE_URL: the Postgres to mend")
    return url


async def _rewinds(url: str) -> list[Rewind]:
    from infra.adapters.postgres import PostgresStore

    store = PostgresStore(url, max_size=1)
    try:
        return await store.rewinds()
    finally:
        await store.close()


async def _mend(url: str, name: str, period: str | None, past: int | None) -> list[Mend]:
    from infra.adapters.postgres import PostgresStore

    store = PostgresStore(url, max_size=1)
    try:
        counter = await store.get(name)
        if counter is None:
            raise Refused(f"no counter named {name!r}")
        rewound = [w.period for w in await store.rewinds(name)]
        periods = [period] if period is not None else rewound
        if not periods and past is None:
            raise Refused(f"no rewind of {name!r} is recorded: give --past VALUE to raise it")
        if not periods:
            periods = [counter.period(datetime.now(UTC))]
        mended = [await store.mend(name, p, past) for p in periods]
        return [m for m in mended if m is not None]
    finally:
        await store.close()
