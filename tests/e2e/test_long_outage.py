"""Postgres away for minutes under load, on the three paths at once (issue 49, "Long
outages"): `numerator up` embedded, on the AWS server edge and on the AWS Lambda edge (each
AWS path on a moto server of its own), all on ONE Postgres, each under a modest steady load of
recorded clients (tests/history.py). Postgres is stopped for OUTAGE_S, then started again.

Held, per path: every answer to a request sent while Postgres was away is a 503 problem with a
`Retry-After` (docs/problems.md: nothing was allocated for it) — no 500, no 504, no request
left without an answer within its client's patience; memory and backlog bounded (the outage's
last minute against its first: the RSS of the path's processes, the records waiting on the
stream, the reply items written and the batchers' lag); the first value handed out within
RESUME_S of Postgres being back; then the history checker against the report, the audit export
and `audit verify`. Prints what it measured (docs/operations.md, "Long outages", quotes it)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import boto3
import httpx
import psutil
import pytest

from infra.run.process import stand_in_aws
from numerator import local
from tests.conftest import temporary_pgserver
from tests.e2e.service import Service
from tests.history import Attempt, Client, asked, settle
from tests.postgres import start as start_postgres
from tests.postgres import stop as stop_postgres

pytestmark = pytest.mark.slow

PATHS = ("embedded", "server", "lambda")
OUTAGE_S = float(os.environ.get("LONG_OUTAGE_S", "120"))
"""Two minutes in CI, the first against the last; docs/operations.md's figures are of three
(LONG_OUTAGE_S=180)."""
BEFORE_S = 12.0  # load before the outage: the baseline
AFTER_S = 15.0  # load once Postgres is back
CLIENTS = 4  # client loops per path: a modest steady load (each waits for its answer)
PATIENCE_S = 15.0  # a client's timeout: REPLY_TIMEOUT_S (5) and a margin
SAMPLE_S = 5.0
MINUTE_S = 60.0
RESUME_S = 10.0
"""The first value after Postgres is back comes within this (its start included)."""
RSS_GROWTH = 4 * 2**20
"""The most a path's processes together may grow (RSS) from the outage's first minute to its
last: a constant, where memory that grows with the outage grows with its length. Measured
before `collecting` and the pool's `_forget_waiters`: 8 MiB on the embedded path and 6 MiB on
the server edge over those two minutes (a worker grew 2.9 MiB a minute, 18 MiB over 6 min 10 s
of outage); since, 0-1 MiB."""
DEPTH_GROWTH = 2 * CLIENTS
"""Records that may be waiting more in the outage's last minute than in its first: on the
in-process stream, or on Kinesis not yet read by a batcher."""
LAG_S = 5.0
"""The batchers' lag behind the stream (MillisBehindLatest) in the outage's last minute, at most:
REPLY_TIMEOUT_S, past which a record could not be answered in time."""
ITEMS_FACTOR = 1.5
"""Reply items written in the outage's last minute at most this many times those of its first
(and 20 more): one answer per request, not answers written again and again."""


@dataclass
class Sample:
    at: float  # seconds since Postgres was stopped (negative before)
    rss: int  # bytes, the path's processes together
    depth: float | None
    """Records waiting: on the in-process stream (embedded); put by the edges and not read by
    the batchers (AWS: the stream's backlog, from their metrics)."""
    items: int | None  # reply table items (AWS)
    lag: float | None  # the batchers' lag behind the stream, the largest (AWS)


def metric(text: str, name: str) -> float | None:
    found = [float(row.split()[-1]) for row in text.splitlines() if row.startswith(name)]
    return sum(found) if found else None


class Path:
    """One `numerator up` under its recorded clients, and what was sampled of it."""

    def __init__(self, name: str, database_url: str, running: contextlib.ExitStack) -> None:
        self.name = name
        args = ["--database-url", database_url]
        self.moto: str | None = None
        if name != "embedded":
            self.moto = running.enter_context(local.moto_server()).url
            args += ["--aws", self.moto, "--edge", name]
        self.service = Service(*args)
        running.callback(self.service.stop)
        # What `up` prints is read all along: a full pipe would stop its workers mid-log.
        self.reading = True
        drain = threading.Thread(target=self._drain, daemon=True)
        drain.start()
        running.callback(drain.join)
        running.callback(setattr, self, "reading", False)
        self.counters = [f"{name}-a", f"{name}-b"]
        self.client = Client(self.service.port, self.counters, timeout=PATIENCE_S, seed=49)
        self.samples: list[Sample] = []

    def _drain(self) -> None:
        while self.reading and self.service.process.poll() is None:
            self.service.said()
            time.sleep(0.2)

    def processes(self) -> list[psutil.Process]:
        root = psutil.Process(self.service.process.pid)
        return [root, *root.children(recursive=True)]

    def rss(self) -> int:
        total = 0
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                total += process.memory_info().rss
        return total

    def batcher_ports(self) -> list[str]:
        ports = []
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                line = process.cmdline()
                if "batcher" in line and "--port" in line:
                    ports.append(line[line.index("--port") + 1])
        return ports

    def items(self) -> int:
        dynamodb = boto3.client("dynamodb", endpoint_url=self.moto, **aws_arguments())
        pages = dynamodb.get_paginator("scan").paginate(
            TableName="numerator-replies", Select="COUNT"
        )
        return sum(page["Count"] for page in pages)

    async def sample(self, http: httpx.AsyncClient, at: float) -> Sample:
        depth = lag = put = None
        with contextlib.suppress(httpx.HTTPError):
            edge = (await http.get(self.service.url + "/metrics")).text
            depth = metric(edge, "numerator_stream_depth_records")
            put = metric(edge, "numerator_records_put_total")
        if self.moto is not None:
            lags, read = [], 0.0
            for port in self.batcher_ports():
                with contextlib.suppress(httpx.HTTPError):
                    text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
                    lags.append(metric(text, "numerator_batcher_lag_seconds") or 0.0)
                    read += metric(text, "numerator_records_in_total") or 0.0
                    # the cancels a batcher puts of the records it gives up, read back
                    put = (
                        None
                        if put is None
                        else put + (metric(text, "numerator_records_put_total") or 0.0)
                    )
            lag = max(lags, default=None)
            depth = None if put is None else put - read
        items = await asyncio.to_thread(self.items) if self.moto is not None else None
        return Sample(at, await asyncio.to_thread(self.rss), depth, items, lag)

    async def sampling(self, down: list[float], stop: asyncio.Event) -> None:
        """Sample every SAMPLE_S until `stop`; times from when Postgres was stopped (`down`,
        set by then; until then from the start, less BEFORE_S)."""
        began = time.monotonic()
        async with httpx.AsyncClient(timeout=5) as http:
            while not stop.is_set():
                now = time.monotonic()
                at = now - down[0] if down else now - began - BEFORE_S
                self.samples.append(await self.sample(http, at))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), SAMPLE_S)


def aws_arguments() -> dict[str, str]:
    env = stand_in_aws()
    return {
        "region_name": env["AWS_DEFAULT_REGION"],
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }


async def drive(paths: Sequence[Path], postgres: Any) -> tuple[float, float]:
    """The load on every path, Postgres stopped for OUTAGE_S and started again; when it was
    stopped and when it was being started (monotonic)."""
    down: list[float] = []
    stop = asyncio.Event()
    loads = [asyncio.create_task(p.client.run(CLIENTS, 10 * OUTAGE_S)) for p in paths]
    samplers = [asyncio.create_task(p.sampling(down, stop)) for p in paths]
    await asyncio.sleep(BEFORE_S)
    await asyncio.to_thread(stop_postgres, postgres)
    down.append(time.monotonic())
    await asyncio.sleep(OUTAGE_S)
    # Back from when it is started: it accepts connections before `start` returns (pg_ctl
    # looks every 0.1 s), and a path that commits at once answers 200s in between (CI: ten on
    # the embedded path, its first value after `start` returned 0.01 s after it).
    up = time.monotonic()
    await asyncio.to_thread(start_postgres, postgres)
    await asyncio.sleep(AFTER_S)
    for p in paths:
        p.client.stop()
    await asyncio.gather(*loads)
    stop.set()
    await asyncio.gather(*samplers)
    return down[0], up


def during(history: Sequence[Attempt], down: float, up: float) -> list[Attempt]:
    """The requests sent while Postgres was away (a request sent just before may have been
    answered by a commit that made it)."""
    return [a for a in history if down <= a.sent and a.ended <= up]


def answers(attempts: Sequence[Attempt]) -> Counter[str]:
    return Counter(
        f"{a.status}" + ("" if a.status != 503 or a.retry_after else " without Retry-After")
        if a.status is not None
        else f"no answer ({a.error[:40]})"
        for a in attempts
    )


def window(samples: Sequence[Sample], since: float, until: float) -> list[Sample]:
    return [s for s in samples if since <= s.at < until]


def most(values: Sequence[float | int | None]) -> float:
    found = [v for v in values if v is not None]
    return max(found) if found else 0.0


def held(path: Path, down: float, up: float) -> list[str]:
    """What this path broke of the outage's rules (empty: none); prints its figures."""
    broken = []
    name, history = path.name, path.client.history
    outage = during(history, down, up)
    seen = answers(outage)
    waits = [a.ended - a.sent for a in outage]
    print(
        f"\nPATH {name}: {len(outage)} requests sent and answered while Postgres was away: "
        f"{dict(seen)}; their wait median {statistics.median(waits) if waits else 0:.2f} s, "
        f"longest {max(waits, default=0):.2f} s"
    )
    if not outage:
        broken.append(f"{name}: no request was sent during the outage")
    wrong = {k: n for k, n in seen.items() if k != "503"}
    if wrong:
        odd = [a for a in outage if a.status != 503 or not a.retry_after]
        broken.append(
            f"{name}: during the outage, answers not 503 with Retry-After: {wrong}; the first, "
            + ", ".join(f"{a.status} {a.sent - down:.2f}-{a.ended - down:.2f} s" for a in odd[:5])
            + f" from Postgres stopped (started again at {up - down:.2f} s)"
        )
    hung = [a for a in history if a.status is None]
    if hung:
        broken.append(f"{name}: {len(hung)} requests without an answer: {hung[0].error}")
    back = [a.ended - up for a in history if a.delivered and a.ended > up]
    resumed = min(back) if back else None
    print(
        f"  first value {'none' if resumed is None else f'{resumed:.2f} s'} after Postgres was back"
    )
    if resumed is None or resumed > RESUME_S:
        broken.append(f"{name}: no value within {RESUME_S:g} s of Postgres being back: {resumed}")
    return broken + bounded(path)


def bounded(path: Path) -> list[str]:
    """Memory and backlog: the outage's last minute against its first."""
    name, samples = path.name, path.samples
    first = window(samples, 0, MINUTE_S)
    last = window(samples, OUTAGE_S - MINUTE_S, OUTAGE_S)
    before = window(samples, -BEFORE_S, 0)
    after = window(samples, OUTAGE_S, math.inf)
    rss = [most([s.rss for s in span]) / 2**20 for span in (before, first, last, after)]
    print(
        f"  RSS (MiB, the largest sample): before {rss[0]:.1f}, the outage's first minute "
        f"{rss[1]:.1f}, its last {rss[2]:.1f}, after {rss[3]:.1f}"
    )
    broken = []
    if (rss[2] - rss[1]) * 2**20 > RSS_GROWTH:
        broken.append(f"{name}: RSS grew {rss[2] - rss[1]:.0f} MiB over the outage")
    depth = [most([s.depth for s in span]) for span in (first, last)]
    print(f"  records waiting (largest): first minute {depth[0]:.0f}, last {depth[1]:.0f}")
    if depth[1] > depth[0] + DEPTH_GROWTH:
        broken.append(f"{name}: records waiting grew from {depth[0]:.0f} to {depth[1]:.0f}")
    if path.moto is None:
        return broken
    items = [written(span) for span in (first, last)]
    lag = [most([s.lag for s in span]) for span in (first, last, after)]
    print(
        f"  reply items written: first minute {items[0]}, last {items[1]}; the batchers' lag (s, "
        f"largest): first minute {lag[0]:.1f}, last {lag[1]:.1f}, after {lag[2]:.1f}"
    )
    if items[1] > ITEMS_FACTOR * items[0] + 20:
        broken.append(f"{name}: reply items written a minute grew from {items[0]} to {items[1]}")
    if lag[1] > LAG_S:
        broken.append(f"{name}: the batchers fell {lag[1]:.1f} s behind the stream")
    return broken


def written(span: Sequence[Sample]) -> int:
    """Reply items written over `span`: those in the table at its end less at its start."""
    items = [s.items for s in span if s.items is not None]
    return items[-1] - items[0] if len(items) > 1 else 0


def test_minutes_without_postgres_on_every_path() -> None:
    with contextlib.ExitStack() as running:
        postgres = running.enter_context(temporary_pgserver())
        paths = [Path(name, postgres.get_uri(), running) for name in PATHS]
        for path in paths:
            with httpx.Client(base_url=path.service.url, timeout=30) as http:
                for counter in path.counters:
                    made = asked(http, "/counters", "POST", json={"name": counter})
                    assert made.status_code == 201, made.text
        began = time.monotonic()
        down, up = asyncio.run(drive(paths, postgres))
        print(f"\nOUTAGE: Postgres stopped {down - began:.1f} s in, back {up - down:.1f} s later")
        broken: list[str] = []
        for path in paths:
            broken += held(path, down, up)
            found, tally, _ = settle(
                path.service.url,
                path.client.history,
                path.counters,
                cuts_cancel=path.name != "lambda",
                deaths_listed=path.name != "lambda",
                within=10.0,
            )
            print(f"  history: {tally.line()}")
            broken += [f"{path.name}: {one}" for one in found[:20]]
            if path.service.process.poll() is not None:
                broken.append(f"{path.name}: `up` exited:\n{path.service.said()[-3000:]}")
        assert not broken, "\n".join(broken)
