"""Steps of a sweep: each constant-rate stretch of the schedule (`const(1000, 10s)`, or each
level of `step()`) summarised on its own — what the service did at that offered rate.

The first second of a step is left out (the service settles from the step before), so a step
needs at least two seconds to be reported."""

from __future__ import annotations

from typing import Any

from bench import histogram
from bench.load import Result
from bench.schedule import Schedule

SETTLE_S = 1


def steps(
    schedule: Schedule, result: Result, service: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per constant-rate segment of at least two seconds: offered and achieved rps,
    latency (ms: the mean and percentiles), non-2xx and errors, and Postgres transactions per
    second (the mean of the service's samples that fall in the step). Empty unless there are two
    or more."""
    rows = []
    began = 0.0
    for segment in schedule.segments:
        start, end = began, began + segment.seconds
        began = end
        if segment.start != segment.end or segment.seconds < SETTLE_S + 1:
            continue
        first, last = int(start) + SETTLE_S, int(end)  # whole seconds [first, last)
        seconds = [s for at, s in result.per_second.items() if first <= at < last]
        span = max(last - first, 1)
        latency = histogram.summary(histogram.merge(s.latency for s in seconds))
        inside = [s for s in service if first <= s["t"] < last]
        transactions = (
            sum(s.get("transactions", 0.0) for s in inside) / len(inside) if inside else None
        )
        rows.append(
            {
                "offered_rps": segment.start,
                "achieved_rps": round(sum(s.ok for s in seconds) / span, 1),
                "latency_mean_ms": latency["mean"],
                "latency_p50_ms": latency["p50"],
                "latency_p99_ms": latency["p99"],
                "latency_max_ms": latency["max"],
                "bad_responses": sum(s.bad for s in seconds),
                "errors": sum(s.errors for s in seconds),
                "missed_sends": sum(s.missed for s in seconds),
                "transactions_per_s": None if transactions is None else round(transactions, 1),
            }
        )
    return rows if len(rows) >= 2 else []
