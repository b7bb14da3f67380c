"""`numerator plan`'s output: the plans side by side as text, or as JSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from numerator.plan import EdgeKind, Plan, PlanError, Traffic, plan, read_measured
from numerator.plan.advice import Advice, advise
from numerator.plan.cost import Prices
from numerator.plan.latency import SERVER_P95_MS, p50, p95
from numerator.plan.model import MEMORY_MB, VCPU_MB, Sizing
from numerator.plan.whole import NOT_PRICED

HEADS = {
    EdgeKind.LAMBDA: "lambda edge",
    EdgeKind.SERVER: "server edge",
    EdgeKind.ATOMIC: "atomic counter",
}


def run_plan(args: argparse.Namespace) -> None:
    if args.measure or args.measure_cpu or args.measure_logs:
        from numerator.plan.measure import measure, measure_cpu, measure_logs
        from numerator.plan.model import MEASURED

        say = lambda line: print(line, file=sys.stderr)  # noqa: E731
        if args.measure_logs:
            measure_logs(say=say)
        elif args.measure_cpu:
            measure_cpu(say=say)
        else:
            # --edge names one edge to measure again, the others' kept; both (the default): all
            measure(say=say, only=None if args.edge == "both" else {EdgeKind(args.edge)})
        print(f"written: {MEASURED}")
        if args.rps is None:
            return
    if args.rps is None:
        raise PlanError("--rps is needed: the mean rate to plan for, requests a second")
    if args.url and args.edge == "server":
        raise PlanError("--url is the Lambdas' (a function URL): the server edge has none")
    if not MEMORY_MB[0] <= args.memory <= MEMORY_MB[1]:
        raise PlanError(
            f"--memory must be from {MEMORY_MB[0]} to {MEMORY_MB[1]:,} MB (a Lambda's), "
            f"not {args.memory}"
        )
    hot = args.hot_share if args.hot_share is not None else 1.0 if args.counters == 1 else 0.5
    load = Traffic(
        args.rps, args.counters, hot, args.count, args.peak_to_mean, args.new_connections
    )
    prices = Prices.read(args.prices, args.region)
    measured = read_measured()
    edges = list(EdgeKind) if args.edge == "both" else [EdgeKind(args.edge)]
    plans = [plan(load, edge, prices, measured, args.memory, url=args.url) for edge in edges]
    advice = recommend(load, plans, prices, measured, args)
    if args.json:
        out = as_json(load, plans, prices, measured, args.region)
        out["recommendation"] = advice.to_json() if advice else None
        out["not_priced"] = list(NOT_PRICED)
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(text(load, plans, prices, measured))
        print("\n".join(whole_lines(advice)))


def as_json(
    load: Traffic, plans: list[Plan], prices: Prices, measured: dict[str, Any], region: str
) -> dict[str, Any]:
    return {
        "load": vars(load) | {"peak_rps": load.peak},
        "region": region,
        "prices": {"file": prices.source, "as_of": prices.as_of},
        "measured": {
            "at": measured["measured_at"],
            "edges_at": measured.get("edges_measured_at", {}),
            "command": measured["command"],
            "invocation_cpu_at": measured.get("invocation_cpu_measured_at"),
            "log_bytes_at": measured.get("log_bytes_measured_at"),
        },
        "plans": [p.to_json() for p in plans],
    }


def recommend(
    load: Traffic,
    plans: list[Plan],
    prices: Prices,
    measured: dict[str, Any],
    args: argparse.Namespace,
) -> Advice | None:
    """The recommendation, when both edges are planned."""
    edges = {p.edge for p in plans}
    if not {EdgeKind.LAMBDA, EdgeKind.SERVER} <= edges:
        return None

    def totals(other: Traffic) -> dict[EdgeKind, float]:
        return {
            edge: plan(
                other, edge, prices, measured, args.memory, others=False, url=args.url
            ).bill.total
            for edge in (EdgeKind.LAMBDA, EdgeKind.SERVER)
        }

    return advise(load, totals)


def whole_lines(advice: Advice | None) -> list[str]:
    """What the bill does not price, and the recommendation."""
    lines = ["", "Not priced (add them if you pay them)"]
    lines += [f"  {item}" for item in NOT_PRICED]
    if advice is not None:
        lines += ["", f"Recommendation: {advice.line}"]
    return lines


def columns(rows: list[tuple[str, list[str]]], heads: list[str]) -> list[str]:
    width = max(len(name) for name, _ in rows)
    cells = [max(len(head), *(len(row[i]) for _, row in rows)) for i, head in enumerate(heads)]
    lines = [" " * width + "".join(f"  {h:>{w}}" for h, w in zip(heads, cells, strict=True))]
    for name, row in rows:
        lines.append(
            f"{name:<{width}}" + "".join(f"  {c:>{w}}" for c, w in zip(row, cells, strict=True))
        )
    return lines


def sizing_rows(plans: list[Plan]) -> list[tuple[str, list[str]]]:
    def row(name: str, get: Any, atomic: bool = False) -> tuple[str, list[str]]:
        """`get`'s answer for each plan; "-" for the atomic counter where it has no such part."""
        return name, [get(p) if atomic or p.edge is not EdgeKind.ATOMIC else "-" for p in plans]

    return [
        row("edge", lambda p: (
            f"{p.sizing.edge_tasks} Fargate tasks (1 vCPU)" if p.edge is EdgeKind.SERVER
            else f"{p.sizing.concurrency:,.0f} concurrent Lambdas"
        ), atomic=True),
        row("  per task or Lambda", lambda p: (
            f"{p.sizing.rps_per_task:,.0f} rps at 60 % CPU" if p.edge is EdgeKind.SERVER
            else lambda_time(p.sizing)
        ), atomic=True),
        row("requests in flight", lambda p: f"{p.sizing.in_flight:,.0f}", atomic=True),
        row("records put a second", lambda p: f"{p.sizing.records_per_s:,.0f}"),
        row("Kinesis shards", lambda p: str(p.sizing.shards)),
        row("reply table (ReplyTableMode)", lambda p: (
            "PROVISIONED: {write:,} write, {read:,} read units".format(**p.sizing.reply_capacity)
            if p.bill.provisioned_replies else "PAY_PER_REQUEST"
        )),
        row("PARTITION_SPREAD", lambda p: str(p.sizing.partition_spread)),
        row("batchers", lambda p: str(p.sizing.batchers)),
        row("Postgres transactions/s", lambda p: f"{p.sizing.transactions_per_s:,.0f}"),
        row("Postgres instance", lambda p: f"{p.sizing.instance_class} Multi-AZ"),
    ]  # fmt: skip


def url(plans: list[Plan]) -> bool:
    return any(p.sizing.url for p in plans)


def text(load: Traffic, plans: list[Plan], prices: Prices, measured: dict[str, Any]) -> str:
    heads = [HEADS[p.edge] for p in plans]
    lines = [
        f"numerator plan: {load.rps:,.0f} rps mean, {load.peak:,.0f} at the peak; "
        f"{load.counters} counters, {load.hot_share:.0%} on the busiest; {load.count} "
        f"value(s) a request"
        + ("; the Lambdas through a function URL, not API Gateway" if url(plans) else ""),
        "",
        "Sizing (for the peak)",
        *columns(sizing_rows(plans), heads),
        "",
        f"AWS calls a second at the mean rate (from the bench, measured {when(measured)})",
    ]
    calls = sorted({call for p in plans for call in p.calls})
    rows = [(f"  {call}", [made(p, call) for p in plans]) for call in calls]
    rows.append(("calls per request", [f"{sum(p.calls.values()) / load.rps:.3f}" for p in plans]))
    lines += columns(rows, heads)
    lines += latency_lines(plans, heads)
    lines += ["", f"Monthly cost, USD ({prices.source}, prices as of {prices.as_of})"]
    items = list(dict.fromkeys(item for p in plans for item in p.bill.lines))
    rows = [(f"  {i}", [money(p.bill.lines.get(i)) for p in plans]) for i in items]
    rows.append(("total a month", [money(p.bill.total) for p in plans]))
    rows.append(("per million requests", [f"${p.bill.per_million:,.2f}" for p in plans]))
    lines += columns(rows, heads)
    for p in plans:
        lines += [f"  {p.edge}: {note}" for note in p.bill.notes]
    lines += connection_lines(plans)
    lines += ["", "Limits"]
    for p in plans:
        for limit in p.limits:
            if limit.state != "within":
                lines.append(
                    f"  {p.edge}: {limit.name}: {limit.state} ({limit.need:,.0f} of "
                    f"{limit.limit:,.0f}): {limit.change}"
                )
    if any(p.edge is EdgeKind.ATOMIC for p in plans):
        lines += ["", ATOMIC]
    return "\n".join(lines)


ATOMIC = (
    "The atomic counter is the serverless design a team would write instead (bench/atomic.py: "
    "one DynamoDB UpdateItem ADD per request,\nmeasured beside numerator by `numerator bench "
    "--aws moto --compare`). It is not numerator: a retried request takes a second\nnumber, "
    "a lost answer leaves a gap nobody can explain, one counter cannot take more than one "
    "partition's writes,\nand there is no per-period reset, template or ledger."
)


def latency_lines(plans: list[Plan], heads: list[str]) -> list[str]:
    """The latency budget per hop, side by side, and what enhanced fan-out would change."""
    timed = [p for p in plans if p.hops]
    if not timed:
        return []
    names = ordered(timed)

    def ms(each: Plan, name: str) -> str:
        found = [hop.ms for hop in each.hops if hop.name == name]
        return f"{found[0]:,.1f}" if found else "-"

    rows = [(f"  {name}", [ms(p, name) if p.hops else "-" for p in plans]) for name in names]
    rows += [
        ("p50 it adds up to", [f"{p50(p.hops):,.0f}" if p.hops else "-" for p in plans]),
        (
            "p95 (the waits' spread; calls as typical)",
            [f"{p95(p.hops):,.0f}" if p.hops else "-" for p in plans],
        ),
        (
            "  measured on moto (mean wait)",
            [f"{p.sizing.measured_wait_s * 1000:,.0f}" for p in plans],
        ),
        (
            "  the wait billed, at the plan's shards",
            [f"{p.sizing.reply_wait_s * 1000:,.0f}" for p in plans],
        ),
        (
            "p50 with enhanced fan-out",
            [f"{p50(p.fan_out_hops):,.0f}" if p.fan_out_hops else "-" for p in plans],
        ),
        (
            "  enhanced fan-out, a month",
            [money(p.fan_out.get("usd_per_month")) if p.fan_out else "-" for p in plans],
        ),
        (
            "  Lambda duration it saves (or costs more)",
            [
                saved(p.fan_out.get("saves_lambda_duration_usd_per_month", 0.0))
                if p.edge is EdgeKind.LAMBDA and p.fan_out
                else "-"
                for p in plans
            ],
        ),
    ]
    return [
        "",
        "Latency budget per hop, ms (figures: numerator/plan/latency.json; enhanced fan-out is "
        "not a read mode yet: docs/aws.md; the server edge's shards sized for a p95 of "
        f"{SERVER_P95_MS:g} ms on phased beats)",
        *columns(rows, heads),
        "Where each hop's figure comes from:",
        *sources(timed),
    ]


def ordered(plans: list[Plan]) -> list[str]:
    """The hops' names in the order a request meets them: the longest list's order, another's
    own hops each after the hop it follows there (first if none does)."""
    names: list[str] = []
    for each in sorted(plans, key=lambda p: -len(p.hops)):
        at = 0
        for hop in each.hops:
            if hop.name in names:
                at = names.index(hop.name) + 1
            else:
                names.insert(at, hop.name)
                at += 1
    return names


def sources(plans: list[Plan]) -> list[str]:
    """Each hop's source, once for the edges it is the same for."""
    said: dict[tuple[str, str], list[str]] = {}
    for each in plans:
        for hop in each.hops:
            said.setdefault((hop.name, hop.source), []).append(str(each.edge))
    return [f"  {name} ({', '.join(edges)}): {source}" for (name, source), edges in said.items()]


def lambda_time(sizing: Sizing) -> str:
    """A Lambda's billed time an invocation, and what it is made of once its CPU is known."""
    if not sizing.invocation_cpu_s:
        return f"{sizing.duration_s * 1000:.0f} ms each"
    return (
        f"{sizing.duration_s * 1000:.0f} ms each ({sizing.invocation_cpu_s * 1000:.0f} ms CPU "
        f"on {sizing.memory_mb / VCPU_MB:.2f} vCPU)"
    )


def made(each: Plan, call: str) -> str:
    return f"{each.calls[call]:,.1f}" if call in each.calls else "-"


def money(usd: float | None) -> str:
    return "-" if usd is None else f"${usd:,.0f}"


def saved(usd: float) -> str:
    """What fan-out saves of a Lambda edge's duration, or what it costs more (it waits longer
    than phased beats' reads on many shards)."""
    return money(usd) if usd >= 0 else f"{money(-usd)} more"


def when(measured: dict[str, Any]) -> str:
    """When measured.json was measured: its date, or each edge's when they differ."""
    edges = measured.get("edges_measured_at") or {}
    days = {edge: at[:10] for edge, at in edges.items()}
    if len(set(days.values())) <= 1:
        return str(measured["measured_at"][:10])
    return ", ".join(f"{edge} {day}" for edge, day in days.items())


def connection_lines(plans: list[Plan]) -> list[str]:
    """Each edge's Postgres connections, by holder, against its instance's max_connections
    (numerator/plan/connections.py)."""
    out = []
    for p in plans:
        if p.connections:
            out += [
                "",
                f"Postgres connections, {p.edge} edge (at the peak)",
                *p.connections.lines(),
            ]
    return out
