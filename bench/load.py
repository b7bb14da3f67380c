"""The built-in load engine: open-model sends on the pacer, latency from the scheduled time into
HDR histograms, per second and overall."""

from __future__ import annotations

import asyncio
import bisect
import itertools
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from bench import histogram
from bench.http import Client, HttpError
from bench.pacing import Pacer
from bench.schedule import Schedule


@dataclass(frozen=True)
class Mix:
    """Which counter each request goes to: one `hot` counter, `uniform` over N, or `zipf`."""

    kind: str = "hot"
    counters: int = 1
    zipf_s: float = 1.1
    prefix: str = "bench"

    def names(self) -> list[str]:
        if self.kind == "hot":
            return [f"{self.prefix}-hot"]
        return [f"{self.prefix}-{i:04d}" for i in range(self.counters)]

    def picker(self, rng: random.Random) -> Callable[[], str]:
        names = self.names()
        if self.kind == "hot" or len(names) == 1:
            return lambda: names[0]
        if self.kind == "uniform":
            return lambda: rng.choice(names)
        weights = [1 / (rank**self.zipf_s) for rank in range(1, len(names) + 1)]
        cumulative = list(itertools.accumulate(weights))
        total = cumulative[-1]
        return lambda: names[bisect.bisect_left(cumulative, rng.random() * total)]


@dataclass
class Second:
    """What happened in one second of the run: sends by their scheduled second, answers by the
    second they arrived in."""

    offered: int = 0
    sent: int = 0
    ok: int = 0
    bad: int = 0
    errors: int = 0
    missed: int = 0
    latency: HdrHistogram = field(default_factory=histogram.new)

    def to_json(self, at: int) -> dict[str, Any]:
        return {
            "second": at,
            "offered": self.offered,
            "sent": self.sent,
            "ok": self.ok,
            "bad": self.bad,
            "errors": self.errors,
            "missed": self.missed,
            "latency_ms": histogram.summary(self.latency),
        }


@dataclass
class Outcome:
    """The client side of one run."""

    seconds: float = 0.0
    offered: int = 0
    sent: int = 0
    ok: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    missed: int = 0
    worst_late_ms: float = 0.0
    cpu_pct: float = 0.0
    per_second: dict[int, Second] = field(default_factory=dict)

    def second(self, at: float) -> Second:
        key = max(0, int(at))
        if key not in self.per_second:
            self.per_second[key] = Second()
        return self.per_second[key]

    @property
    def latency(self) -> HdrHistogram:
        return histogram.merge(s.latency for s in self.per_second.values())

    @property
    def bad(self) -> int:
        return sum(n for status, n in self.statuses.items() if not 200 <= status < 300)


@dataclass(frozen=True)
class Load:
    """What to send: the schedule, where, and how."""

    schedule: Schedule
    mix: Mix = Mix()
    count: int = 1
    idempotency_share: float = 0.0
    connections: int = 256
    timeout: float = 10.0
    seed: int = 1
    path: str | None = None  # send every request here instead (selfcheck's trivial route)


Progress = Callable[[float, Outcome], None]


async def drive(client: Client, load: Load, progress: Progress | None = None) -> Outcome:
    """Send `load` through `client`; return what came back."""
    loop = asyncio.get_running_loop()
    rng = random.Random(load.seed)
    pick = load.mix.picker(rng)
    query = f"?count={load.count}" if load.count != 1 else ""
    plain = {
        name: client.build("POST", load.path or f"/counters/{name}/next{query}")
        for name in load.mix.names()
    }
    run = uuid.uuid4().hex[:8]
    out = Outcome()
    pacer = Pacer(load.schedule.times(), loop.time, asyncio.sleep)
    start = loop.time() + 0.05
    cpu_start = time.process_time()
    open_requests = 0
    drained: asyncio.Future[None] | None = None  # made once every request is released

    def done(due: float, status: int, _: bytes, error: HttpError | None) -> None:
        nonlocal open_requests
        open_requests -= 1
        now = loop.time()
        second = out.second(now - start)
        if error is not None:
            out.errors[error.kind] += 1
            second.errors += 1
        else:
            out.statuses[status] += 1
            if 200 <= status < 300:
                out.ok += 1
                second.ok += 1
                histogram.record(second.latency, now - due)
            else:
                second.bad += 1
        if open_requests == 0 and drained is not None and not drained.done():
            drained.set_result(None)

    async def report() -> None:
        while True:
            await asyncio.sleep(1.0)
            if progress is not None:
                progress(loop.time() - start, out)

    reporter = asyncio.create_task(report())
    for offset in load.schedule.times():
        out.second(offset).offered += 1
        out.offered += 1
    async for release in pacer.releases(start):
        second = out.second(release.due - start)
        second.sent += 1
        if release.late > pacer.tolerance:
            second.missed += 1
        out.sent += 1
        name = pick()
        if load.idempotency_share and not load.path and rng.random() < load.idempotency_share:
            raw = client.build(
                "POST",
                f"/counters/{name}/next{query}",
                {"Idempotency-Key": f"bench-{run}-{release.n}"},
            )
        else:
            raw = plain[name]
        open_requests += 1
        client.submit(raw, load.timeout, release.due, done)
    if open_requests:
        drained = loop.create_future()
        await drained
    reporter.cancel()
    out.seconds = loop.time() - start
    out.missed = pacer.missed
    out.worst_late_ms = pacer.worst * 1000
    out.cpu_pct = 100 * (time.process_time() - cpu_start) / max(out.seconds, 1e-9)
    return out
