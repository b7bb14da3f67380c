"""`numerator plan`'s one-line recommendation: the cheaper edge at the rate planned, and the rate
where the two edges' monthly bills cross (found by planning both at other rates of the same
shape), or that one is cheaper at every rate, and what the other still offers."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from numerator.plan.model import EdgeKind, Traffic

LOWEST, HIGHEST = 0.01, 1_000_000.0  # the rates searched, requests a second
STEPS = 80  # rates tried between them, evenly on a log scale, before the crossing is bisected

LAMBDA_PLACE = (
    "the Lambda edge still has its place: no task or load balancer to run, patch or size, "
    "each request isolated in its container, bursts met without planning capacity, and "
    "`sam local start-api` on a laptop"
)


@dataclass(frozen=True)
class Advice:
    cheaper: EdgeKind
    line: str
    break_even_rps: float | None  # None: one edge is cheaper at every rate searched

    def to_json(self) -> dict[str, Any]:
        rounded = None if self.break_even_rps is None else round(self.break_even_rps, 2)
        return {"cheaper": str(self.cheaper), "break_even_rps": rounded, "line": self.line}


def at(load: Traffic, rps: float) -> Traffic:
    """`load`'s shape at another mean rate (its new connections in proportion)."""
    new = None if load.new_connections is None else load.new_connections * rps / load.rps
    return replace(load, rps=rps, new_connections=new)


def crossing(gap: Callable[[float], float]) -> float | None:
    """The lowest rate where `gap` (the Lambda edge's bill less the server edge's) changes sign."""
    rates = [LOWEST * (HIGHEST / LOWEST) ** (i / STEPS) for i in range(STEPS + 1)]
    before = gap(rates[0])
    for low, high in itertools.pairwise(rates):
        after = gap(high)
        if (before > 0) != (after > 0):
            for _ in range(40):
                middle = math.sqrt(low * high)
                if (gap(middle) > 0) == (before > 0):
                    low = middle
                else:
                    high = middle
            return math.sqrt(low * high)
        before = after
    return None


def advise(load: Traffic, totals: Callable[[Traffic], dict[EdgeKind, float]]) -> Advice:
    """`totals`: each edge's monthly bill for a load."""
    here = totals(load)
    lam, server = here[EdgeKind.LAMBDA], here[EdgeKind.SERVER]

    def gap(rps: float) -> float:
        bills = totals(at(load, rps))
        return bills[EdgeKind.LAMBDA] - bills[EdgeKind.SERVER]

    even = crossing(gap)
    cheaper = EdgeKind.SERVER if server <= lam else EdgeKind.LAMBDA
    head = (
        f"at {load.rps:,.0f} rps the {cheaper} edge: ${min(lam, server):,.0f} a month against "
        f"${max(lam, server):,.0f}"
    )
    if even is None:
        always = "server" if gap(LOWEST) > 0 else "Lambda"
        why = (
            "its few tasks' fixed cost is below what the Lambda edge pays per request even at "
            f"{LOWEST:g} rps, since both keep the same Postgres, batchers and stream"
            if always == "server"
            else "its per-request cost stays below the server edge's tasks and load balancer"
        )
        tail = (
            f"; the {always} edge is cheaper at every rate from {LOWEST:g} to {HIGHEST:,.0f} "
            f"rps: {why}"
        )
        if always == "server":
            tail += f"; {LAMBDA_PLACE}"
        return Advice(cheaper, head + tail, None)
    below = "Lambda" if gap(even / 2) < 0 else "server"
    above = "server" if below == "Lambda" else "Lambda"
    tail = (
        f"; the edges break even at {even:,.1f} rps: below it the {below} edge is cheaper, "
        f"above it the {above} edge"
    )
    if above == "server":
        tail += f" ({LAMBDA_PLACE})"
    return Advice(cheaper, head + tail, even)
