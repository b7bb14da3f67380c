"""Health that tells the truth: named checks of what a process needs to hand out values, run
together with a time limit, the answer kept for a moment.

An edge on the AWS path is healthy only when Postgres, the stream and the reply table answer and
at least one batcher said it was alive within BATCHER_ALIVE_S; a batcher only when Postgres, the
stream and the reply table answer and none of its own loops is in trouble. A load balancer that
polls /healthz then stops sending requests within seconds of the stack losing any of them.

The answer is kept for FRESH_S, so that many health checkers (a load balancer's nodes, every
worker's) cost the stream and the table a call or two a second, not one per probe: Kinesis
allows its account 20 DescribeStreamSummary calls a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping

from infra.errors import NumeratorError

Check = Callable[[], Awaitable[str | None]]
"""A check: None when what it checks works; what is wrong otherwise (or it raises
NumeratorError, or takes longer than the time limit)."""

TIMEOUT_S = 1.5  # a check that has not answered by then is down
FRESH_S = 1.0  # a report is reused for this long
BATCHER_ALIVE_S = 5.0  # a batcher says it is alive every ALIVE_EVERY_S; silent this long: gone
ALIVE_EVERY_S = 1.0
EDGE_DEAD_S = 5.0  # an edge says it is alive every ALIVE_EVERY_S; silent this long: died
OK = "ok"


class Health:
    def __init__(
        self,
        checks: Mapping[str, Check],
        timeout: float = TIMEOUT_S,
        fresh: float = FRESH_S,
        clock: Callable[[], float] = time.monotonic,
        alerts: Mapping[str, str] | None = None,
    ) -> None:
        """`alerts`: what a person must look at that does not stop values being handed out
        (the trail rewritten under the anchors): shown beside the checks, never turning red."""
        self.checks, self.timeout, self.fresh, self.clock = dict(checks), timeout, fresh, clock
        self.alerts: Mapping[str, str] = {} if alerts is None else alerts
        self._last: tuple[float, dict[str, str]] | None = None
        self._running: asyncio.Future[dict[str, str]] | None = None

    async def report(self) -> dict[str, str]:
        """Each check's answer, `ok` or what is wrong, from one run shared by every caller that
        asks while it runs, and reused for FRESH_S after."""
        if self._last is not None and self.clock() - self._last[0] < self.fresh:
            return self._last[1]
        if self._running is None:
            self._running = asyncio.ensure_future(self._run())
            self._running.add_done_callback(self._done)
        return await asyncio.shield(self._running)

    async def recent(self, wait: float = 0.2) -> dict[str, str]:
        """The report for a scrape, which must not hang on a dead dependency: a fresh one if
        it comes within `wait` seconds, else the last one (a check that has not answered yet
        counts as down), and the run goes on for the next caller."""
        try:
            async with asyncio.timeout(wait):
                return await self.report()
        except TimeoutError:
            last = self._last[1] if self._last is not None else {}
            return {
                name: last.get(name, f"down: no answer within {wait:g} s") for name in self.checks
            }

    def _done(self, running: asyncio.Future[dict[str, str]]) -> None:
        self._running = None
        if not running.cancelled() and running.exception() is None:
            self._last = self.clock(), running.result()

    async def _run(self) -> dict[str, str]:
        names = list(self.checks)
        answers = await asyncio.gather(*(self._one(self.checks[name]) for name in names))
        return dict(zip(names, answers, strict=True))

    async def _one(self, check: Check) -> str:
        try:
            async with asyncio.timeout(self.timeout):
                wrong = await check()
        except TimeoutError:
            return f"down: no answer within {self.timeout:g} s"
        except NumeratorError as exc:
            return f"down: {exc}"
        return OK if wrong is None else f"down: {wrong}"


OUTCOME_S = 5.0  # a call that failed this recently, and has not worked since, turns health red


class Outcomes:
    """The latest outcome of each kind of call a process makes for real — records put, the
    stream read, replies written and read — so that /healthz sees the data plane, not only the
    cheap calls it makes itself: a table that answers DescribeTable but refuses every
    BatchGetItem left every client a 504 under a green /healthz. Only a call that was refused,
    or failed past its retries, counts as failed; one retried to success is a success."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.latest: dict[str, tuple[float, str | None]] = {}

    def worked(self, call: str) -> None:
        self.latest[call] = (self.clock(), None)

    def failed(self, call: str, why: str) -> None:
        self.latest[call] = (self.clock(), why)

    async def check(self) -> str | None:
        """A Check: None, or each call whose latest outcome, within OUTCOME_S, failed."""
        now = self.clock()
        wrong = [
            why for at, why in self.latest.values() if why is not None and now - at < OUTCOME_S
        ]
        return "; ".join(sorted(wrong)) or None


def healthy(report: Mapping[str, str]) -> bool:
    return all(answer == OK for answer in report.values())


def verdict(
    report: Mapping[str, str], alerts: Mapping[str, str] | None = None
) -> tuple[int, dict[str, object]]:
    """The /healthz answer of every numerator process, the edge's and the batcher's: 200 with
    status ok when every check answers, else 503 with status degraded; each check's answer
    beside, so that a red one names what is down; and `alerts`, when there are any, which
    change neither."""
    ok = healthy(report)
    body: dict[str, object] = {"status": "ok" if ok else "degraded", **report}
    if alerts:
        body["alerts"] = dict(alerts)
    return (200 if ok else 503), body


def responds(ping: Callable[[], Awaitable[None]]) -> Check:
    """A check that `ping` returns (rather than raises NumeratorError or hangs)."""

    async def check() -> str | None:
        await ping()
        return None

    return check
