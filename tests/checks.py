"""Checks shared by the tests: uniqueness, no holes, the order guarantee, problem responses."""

from __future__ import annotations

import asyncio
import bisect
import inspect
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from infra.observe.health import EDGE_DEAD_S


@dataclass(frozen=True)
class Answer:
    counter: str
    first: int
    last: int
    sent: float  # monotonic time the request was sent
    received: float  # monotonic time its reply was read


PROBLEM = "application/problem+json"


def problem(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    """Check that `response` is the problem `kind` with `status`; its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["type"] == f"urn:numerator:problem:{kind}"
    assert body["status"] == status
    return body  # type: ignore[no-any-return]


def assert_guarantees(answers: list[Answer], start: int = 1) -> None:
    """Guarantees 1 and 2 over a test's recorded answers: no value handed out twice, no hole
    (every value from `start` on was answered), and real-time order (order_pairs)."""
    by_counter: dict[str, list[int]] = {}
    for a in answers:
        by_counter.setdefault(a.counter, []).extend(range(a.first, a.last + 1))
    for counter, values in by_counter.items():
        assert len(values) == len(set(values)), f"{counter}: a value was handed out twice"
        assert sorted(values) == list(range(start, start + len(values))), f"{counter}: holes"
    order_pairs(answers)


def order_pairs(answers: list[Answer]) -> int:
    """Check that if A's reply was read before B was sent, A's values are smaller than B's;
    how many such pairs there were (none, for one burst sent all at once)."""
    by_counter: dict[str, list[Answer]] = {}
    for a in answers:
        by_counter.setdefault(a.counter, []).append(a)
    pairs = 0
    for counter, items in by_counter.items():
        done = sorted(items, key=lambda a: a.received)
        received = [a.received for a in done]
        highest: list[int] = []  # highest last value among replies read so far
        for a in done:
            highest.append(max(highest[-1], a.last) if highest else a.last)
        for b in items:
            i = bisect.bisect_left(received, b.sent)  # replies read strictly before b was sent
            if i:
                pairs += i
                assert highest[i - 1] < b.first, f"{counter}: order broken for {b}"
    return pairs


def assert_ordered(answers: list[Answer]) -> None:
    """order_pairs, for a test built to send requests after others' replies: it must have
    seen some."""
    assert order_pairs(answers) > 0, (
        "no request was sent after another's reply: the check saw nothing"
    )


async def until(check: Callable[[], Any], within: float) -> float:
    """Poll `check` (true, or an awaitable of true) until it holds; the seconds it took (fails
    after `within`)."""
    start = time.monotonic()
    while True:
        held = check()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return time.monotonic() - start
        assert time.monotonic() - start < within, f"not within {within} s"
        await asyncio.sleep(0.05)


def values(runs: Iterable[dict[str, Any]]) -> set[int]:
    """The values of report runs ({"first", "last", ...})."""
    return {v for run in runs for v in range(run["first"], run["last"] + 1)}


def assert_accounted(url: str, counter: str, received: set[int]) -> dict[str, Any]:
    """Guarantee 5 at the end of a crash test: the completeness report of the counter's period
    shows no unexplained gap, every value a client received is in it, and every value no
    client received is void with a reason or listed as `unsure` (issued to a request whose edge
    died before it could answer or cancel it). An edge is known to have died once it has been
    silent for EDGE_DEAD_S: the report is asked again until then."""
    deadline = time.monotonic() + EDGE_DEAD_S + 10
    while True:
        report = httpx.get(f"{url}/counters/{counter}/report", timeout=30).json()
        assert report["unexplained_gaps"] == 0 and report["issued_twice"] == [], report
        assert report["rising"], report
        issued = set(range(report["first"], report["last"] + 1)) if report["issued"] else set()
        assert received <= issued, "a client got a value the trail does not hold"
        missing = issued - received - values(report["voids"]) - values(report["unsure_runs"])
        if not missing:
            break
        assert time.monotonic() < deadline, f"unexplained: {sorted(missing)[:20]} in {report}"
        time.sleep(0.5)
    abandoned = values(v for v in report["voids"] if v["reason"] == "abandoned")
    assert not received & abandoned, "a value a client got is void as abandoned"
    return report  # type: ignore[no-any-return]
