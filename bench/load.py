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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from bench import histogram
from bench.http import HttpError, HttpPool
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
class Result:
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

    def offer(self, times: Iterable[float]) -> None:
        """The schedule's sends, by the second each is due in."""
        for offset in times:
            self.second(offset).offered += 1
            self.offered += 1

    def release(self, at: float, late: bool) -> None:
        """A send released `at` seconds into the run, `late` past the pacer's tolerance."""
        second = self.second(at)
        second.sent += 1
        second.missed += late
        self.sent += 1

    def answered(self, at: float, status: int, error: HttpError | None, latency: float) -> None:
        """An answer (or a failure) that arrived `at` seconds into the run."""
        second = self.second(at)
        if error is not None:
            self.errors[error.kind] += 1
            second.errors += 1
            return
        self.statuses[status] += 1
        if 200 <= status < 300:
            self.ok += 1
            second.ok += 1
            histogram.record(second.latency, latency)
        else:
            second.bad += 1


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


Progress = Callable[[float, Result], None]


class Requests:
    """The requests a load sends, built once: one per counter, and a keyed one for each send
    that carries an Idempotency-Key (`idempotency_share` of them)."""

    def __init__(self, client: HttpPool, load: Load, rng: random.Random) -> None:
        self.client, self.load, self.rng = client, load, rng
        self.pick = load.mix.picker(rng)
        self.query = f"?count={load.count}" if load.count != 1 else ""
        self.plain = {
            name: client.build("POST", load.path or f"/counters/{name}/next{self.query}")
            for name in load.mix.names()
        }
        self.run = uuid.uuid4().hex[:8]

    def next(self, n: int) -> bytes:
        name = self.pick()
        share = self.load.idempotency_share
        if share and not self.load.path and self.rng.random() < share:
            key = {"Idempotency-Key": f"bench-{self.run}-{n}"}
            return self.client.build("POST", f"/counters/{name}/next{self.query}", key)
        return self.plain[name]


class Open:
    """The requests in flight, and a wait until none is."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.count = loop, 0
        self.none: asyncio.Future[None] | None = None  # made once every request is released

    def closed(self) -> None:
        self.count -= 1
        if self.count == 0 and self.none is not None and not self.none.done():
            self.none.set_result(None)

    async def drained(self) -> None:
        if self.count:
            self.none = self.loop.create_future()
            await self.none


async def drive(client: HttpPool, load: Load, progress: Progress | None = None) -> Result:
    """Send `load` through `client`; return what came back."""
    loop = asyncio.get_running_loop()
    requests = Requests(client, load, random.Random(load.seed))
    out = Result()
    out.offer(load.schedule.times())
    pacer = Pacer(load.schedule.times(), loop.time, asyncio.sleep)
    start = loop.time() + 0.05
    cpu_start = time.process_time()
    flying = Open(loop)

    def done(due: float, status: int, _: bytes, error: HttpError | None) -> None:
        now = loop.time()
        out.answered(now - start, status, error, now - due)
        flying.closed()

    reporter = asyncio.create_task(report(progress, loop, start, out))
    async for release in pacer.releases(start):
        out.release(release.due - start, release.late > pacer.tolerance)
        flying.count += 1
        client.submit(requests.next(release.n), load.timeout, release.due, done)
    await flying.drained()
    reporter.cancel()
    out.seconds = loop.time() - start
    out.missed = pacer.missed
    out.worst_late_ms = pacer.worst * 1000
    out.cpu_pct = 100 * (time.process_time() - cpu_start) / max(out.seconds, 1e-9)
    return out


async def report(
    progress: Progress | None, loop: asyncio.AbstractEventLoop, start: float, out: Result
) -> None:
    """Show the run so far every second, until cancelled."""
    while True:
        await asyncio.sleep(1.0)
        if progress is not None:
            progress(loop.time() - start, out)
