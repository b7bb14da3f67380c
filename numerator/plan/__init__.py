"""`numerator plan`: what a rate needs and costs on AWS, for each edge, from the bench's
measurements (measured.json) and a dated prices file (prices.json)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from batcher.worker import SHARDS_EVERY_S as LISTS_EVERY_S
from infra.adapters.kinesis import SHARDS_EVERY_S
from infra.settings import ReadBeats, Settings
from numerator.plan.connections import Budget, connection_budget, proxy_line
from numerator.plan.cost import INSTANCES, Bill, Prices, bill, fan_out, per_record
from numerator.plan.latency import Hop, budget, p50, p95, server_shards
from numerator.plan.model import (
    LAMBDA_MEMORY_MB,
    MEASURED,
    MEMORIES_MB,
    VCPU_MB,
    EdgeKind,
    Limit,
    Measured,
    PlanError,
    Sizing,
    Traffic,
    capacity,
    limits,
    size,
)
from numerator.plan.whole import instance_class, whole_bill

__all__ = ["EdgeKind", "Plan", "PlanError", "Traffic", "plan"]


@dataclass
class Plan:
    edge: EdgeKind
    load: Traffic
    sizing: Sizing
    calls: dict[str, float]  # a second, at the mean rate
    limits: list[Limit]
    bill: Bill
    reply_units: dict[str, float]  # the reply table's, a second at the mean rate (measured)
    hops: list[Hop] = field(default_factory=list)  # the latency budget, reading by GetRecords
    fan_out_hops: list[Hop] = field(default_factory=list)  # ... with enhanced fan-out
    fan_out: dict[str, float] = field(default_factory=dict)  # what enhanced fan-out costs, saves
    connections: Budget | None = None  # Postgres's (none for the atomic counter)

    def to_json(self) -> dict[str, Any]:
        sizing = self.sizing
        return {
            "edge": str(self.edge),
            "sizing": {
                "peak_rps": sizing.peak_rps,
                "edge_tasks": sizing.edge_tasks,
                "rps_per_task": round(sizing.rps_per_task),
                "lambda_concurrency": round(sizing.concurrency),
                "in_flight": round(sizing.in_flight),
                "reply_wait_ms": round(sizing.reply_wait_s * 1000),
                "lambda_memory_mb": sizing.memory_mb,
                "front": front(self.edge, sizing.url),
                "invocation_cpu_ms": round(sizing.invocation_cpu_s * 1000, 2),
                "lambda_duration_ms": round(sizing.duration_s * 1000),
                "records_per_s": round(sizing.records_per_s),
                "record_bytes": sizing.record_bytes,
                "shards": sizing.shards,
                "partition_spread": sizing.partition_spread,
                "batchers": sizing.batchers,
                "postgres_transactions_per_s": round(sizing.transactions_per_s, 1),
                "postgres_instance": sizing.instance_class,
                "reply_table": (
                    None
                    if self.edge is EdgeKind.ATOMIC
                    else {"mode": "PROVISIONED", "units": sizing.reply_capacity}
                    if self.bill.provisioned_replies
                    else {"mode": "PAY_PER_REQUEST"}
                ),
            },
            "aws_calls_per_s": {call: round(n, 1) for call, n in sorted(self.calls.items())},
            "aws_calls_per_request": round(sum(self.calls.values()) / self.load.rps, 4),
            "reply_units_per_s": {op: round(n, 1) for op, n in sorted(self.reply_units.items())},
            "limits": [limit.to_json() for limit in self.limits],
            "latency_budget": {
                "hops": [hop.to_json() for hop in self.hops],
                "p50_ms": round(p50(self.hops), 1),
                "p95_ms": round(p95(self.hops), 1),
                "measured_reply_wait_ms": round(sizing.measured_wait_s * 1000),
                "with_enhanced_fan_out": {
                    "hops": [hop.to_json() for hop in self.fan_out_hops],
                    "p50_ms": round(p50(self.fan_out_hops), 1),
                    "p95_ms": round(p95(self.fan_out_hops), 1),
                    **{k: round(v, 2) for k, v in self.fan_out.items()},
                },
            }
            if self.hops
            else None,
            "cost": self.bill.to_json(),
            "postgres_connections": self.connections.to_json() if self.connections else None,
        }


def read_measured(path: Path = MEASURED) -> dict[str, Any]:
    try:
        data: dict[str, Any] = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise PlanError(f"cannot read {path} (numerator plan --measure makes it): {exc}") from exc
    return data


def cpu_hop(sizing: Sizing) -> Hop:
    """What a Lambda's CPU adds to its time, past a whole core's (the hops' figures are AWS's
    calls, not the function's own work)."""
    share = sizing.memory_mb / VCPU_MB
    return Hop(
        f"the function's CPU at {share:.2f} vCPU",
        (sizing.duration_s - sizing.reply_wait_s) * 1000,
        f"{sizing.invocation_cpu_s * 1000:.1f} ms a warm invocation on a whole core (numerator "
        f"plan --measure-cpu), at {sizing.memory_mb} MB's share: one vCPU at {VCPU_MB} MB",
    )


def memories(
    load: Traffic, edge: EdgeKind, prices: Prices, data: dict[str, Any], memory: int, url: bool
) -> list[str]:
    """What the Lambdas would cost and take at the other memory sizes: more memory, more CPU."""
    notes = []
    for mb in MEMORIES_MB:
        if mb == memory:
            continue
        other = plan(load, edge, prices, data, mb, others=False, url=url)
        notes.append(
            f"at {mb:,} MB a Lambda would cost ${other.bill.total:,.0f} a month "
            f"(${other.bill.per_million:.2f} a million), {other.sizing.duration_s * 1000:.0f} ms "
            f"an invocation"
        )
    return notes


def front(edge: EdgeKind, url: bool) -> str:
    """What a request comes in through."""
    if edge is EdgeKind.SERVER:
        return "Application Load Balancer"
    return "function URL" if url else "API Gateway HTTP API"


def through_url(
    load: Traffic, edge: EdgeKind, prices: Prices, data: dict[str, Any], memory: int
) -> str:
    """What the Lambdas would cost reached by a function URL, not API Gateway."""
    other = plan(load, edge, prices, data, memory, others=False, url=True)
    how = "FunctionUrl=true, --url" if edge is EdgeKind.LAMBDA else "--url"
    return (
        f"through a function URL ({how}) instead of API Gateway: "
        f"${other.bill.total:,.0f} a month (${other.bill.per_million:.2f} a million)"
    )


def postgres(sizing: Sizing, commits: float, prices: Prices) -> Budget | None:
    """The instance class for the commits a second and their CPU (whole.instance_class), then
    for the connections, which may call for a larger one or RDS Proxy
    (numerator/plan/connections.py); None without Postgres."""
    sizing.instance_class = instance_class(sizing, commits, prices)
    if sizing.edge is EdgeKind.ATOMIC:
        return None
    connections = connection_budget(sizing, INSTANCES, prices.usd)
    sizing.instance_class = connections.instance
    return connections


def priced(connections: Budget | None, month: Bill, prices: Prices) -> Budget | None:
    """`connections`, with RDS Proxy's line on the bill when they put one in front."""
    if connections:
        month.lines.update(proxy_line(connections, prices.usd, prices.hours))
    return connections


def plan(
    load: Traffic,
    edge: EdgeKind,
    prices: Prices,
    measured: dict[str, Any] | None = None,
    memory: int = LAMBDA_MEMORY_MB,
    others: bool = True,
    url: bool = False,
    settings: Settings | None = None,
) -> Plan:
    """`memory`: a Lambda's (template.yaml's EdgeMemory), in MB; `others`: with what the
    Lambdas would cost at the other sizes (MEMORIES_MB) and through a function URL, in the
    bill's notes; `url`: the Lambdas reached by their function URL, not API Gateway."""
    data = measured if measured is not None else read_measured()
    runs = Measured.of(edge, data["edges"][str(edge)])
    defaults = settings or Settings.of()  # the settings the template keeps
    interval = defaults.aws.read_interval_ms / 1000
    cpu = float((data.get("invocation_cpu_ms") or {}).get(str(edge)) or 0.0)
    front = (str(defaults.edge.front_frame_policy), defaults.aws.read_beats is ReadBeats.PHASED)
    record = float(data["record_bytes"])
    commits = float(data["commits_per_s"])
    ff = defaults.edge.front_frame_ms
    sizing = size(load, runs, record, ff, interval, cpu, memory, *front)
    if edge is EdgeKind.SERVER:  # the shards for its p95, if more than its rate's
        least = server_shards(defaults, 1000 / commits, sizing.shards)
        sizing = size(load, runs, record, ff, interval, cpu, memory, *front, least)
    sizing.url = url and edge is not EdgeKind.SERVER
    connections = postgres(sizing, commits, prices)
    calls = runs.calls(load.rps, sizing.units(), interval)
    if edge is EdgeKind.LAMBDA:
        # each container lists the shards when it starts and every SHARDS_EVERY_S (a bench's
        # few containers start as its rate grows: the fit would take that for a per-request
        # call), each batcher every so often (batcher/worker.py)
        containers = load.rps * sizing.duration_s
        batchers = sizing.batchers / min(LISTS_EVERY_S, defaults.frames.lease_ttl_s / 3)
        calls["list_shards"] = batchers + containers / SHARDS_EVERY_S
    units = runs.reply_units(load.rps, sizing.units())
    peak_units = runs.reply_units(load.peak, sizing.units())
    sizing.reply_writes_per_s = peak_units.get("write", 0.0)
    scale = load.rps / sizing.peak_rps
    estimated = per_record(sizing, calls, scale)  # for a measured.json without reply units
    sizing.reply_capacity = capacity(peak_units or {op: n / scale for op, n in estimated.items()})
    month = bill(load, sizing, calls, prices, units)
    whole_bill(month, load, sizing, calls, prices, data)
    out = Plan(
        edge, load, sizing, calls, limits(sizing, commits, month.provisioned_replies), month, units
    )
    out.connections = priced(connections, out.bill, prices)
    if sizing.invocation_cpu_s and edge is not EdgeKind.SERVER and others:
        out.bill.notes += memories(load, edge, prices, data, memory, url)
    if edge is not EdgeKind.SERVER and others and not url:
        out.bill.notes.append(through_url(load, edge, prices, data, memory))
    if edge is not EdgeKind.ATOMIC:
        timed(out, defaults, 1000 / commits, prices)
    return out


def timed(out: Plan, settings: Settings, commit_ms: float, prices: Prices) -> None:
    """A plan's latency budget, with and without enhanced fan-out, and what fan-out costs."""
    sizing, edge = out.sizing, out.edge
    out.hops = budget(edge, settings, commit_ms, shards=sizing.shards)
    out.fan_out_hops = budget(edge, settings, commit_ms, fan_out=True)
    if sizing.invocation_cpu_s and edge is EdgeKind.LAMBDA:
        hop = cpu_hop(sizing)
        out.hops.append(hop)
        out.fan_out_hops.append(hop)
    faster = (p50(out.hops) - p50(out.fan_out_hops)) / 1000
    out.fan_out = fan_out(out.load, sizing, prices, faster)
