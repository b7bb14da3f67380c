"""What a deployment costs a month, line by line, from a prices file (prices.json: each price
with its unit and source; `--prices FILE` gives another of the same shape).

Request-priced items are charged at the mean rate; capacity (shards, tasks, instances) at what the
peak needs, since it runs all month. Where a figure is not measured (bytes an ALB processes per
request), it is a named assumption below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from numerator.plan.model import MONTH_S, EdgeKind, PlanError, Sizing, Traffic

PRICES = Path(__file__).with_name("prices.json")
NEEDED: tuple[str, ...] = (
    "api_gateway_http_per_million",
    "api_gateway_http_per_million_over_300m",
    "lambda_per_million",
    "lambda_arm64_gb_second",
    "lambda_arm64_gb_second_over_7500m",
    "fargate_arm64_vcpu_hour",
    "fargate_arm64_gb_hour",
    "alb_hour",
    "alb_lcu_hour",
    "kinesis_shard_hour",
    "kinesis_put_payload_units_per_million",
    "kinesis_on_demand_stream_hour",
    "kinesis_on_demand_gb_written",
    "kinesis_on_demand_gb_read",
    "dynamodb_write_per_million",
    "dynamodb_read_per_million",
    "dynamodb_wcu_hour",
    "dynamodb_rcu_hour",
    "rds_gp3_gb_month",
    "cloudwatch_metric_month",
    "cloudwatch_alarm_month",
    # the whole bill's (numerator/plan/whole.py)
    "cloudwatch_logs_gb",
    "cloudwatch_logs_stored_gb_month",
    "nat_gateway_hour",
    "nat_gateway_gb",
    "vpc_interface_endpoint_hour",
    "vpc_interface_endpoint_gb",
    "transfer_out_gb_first_10tb",
    "transfer_out_gb_next_40tb",
    "transfer_out_gb_next_100tb",
    "transfer_out_gb_over_150tb",
    "rds_cpu_credit_vcpu_hour",
)
INSTANCES = ("db.t4g.micro", "db.t4g.small", "db.m7g.large")  # smallest first
NEEDED += tuple(f"rds_{name}_hour" for name in INSTANCES)

# Assumptions (not measured here), each named where it is used:
EDGE_TASK_VCPU, EDGE_TASK_GB = 1.0, 2.0  # template.yaml's Fargate edge task
BATCHER_VCPU, BATCHER_GB = 0.5, 1.0  # template.yaml BatcherCpu 512, BatcherMemory 1024
RDS_STORAGE_GB = 20
CUSTOM_METRICS, ALARMS = 25, 9  # the EMF metrics numerator writes; template.yaml's alarms


@dataclass(frozen=True)
class Prices:
    source: str
    as_of: str
    hours: float
    usd: dict[str, float]

    @classmethod
    def read(cls, path: Path | None, region: str) -> Prices:
        path = path or PRICES
        try:
            data = orjson.loads(path.read_bytes())
        except OSError as exc:
            raise PlanError(f"cannot read the prices file {path}: {exc.strerror}") from exc
        except orjson.JSONDecodeError as exc:
            raise PlanError(f"the prices file {path} is not JSON: {exc}") from exc
        regions = data.get("regions") if isinstance(data, dict) else None
        if not isinstance(regions, dict) or not regions:
            raise PlanError(f"the prices file {path} has no regions")
        if region not in regions:
            raise PlanError(
                f"the prices file {path} has no prices for {region} (it has "
                f"{', '.join(sorted(regions))}): pass --prices FILE with them"
            )
        usd = {name: price(path, region, name, item) for name, item in regions[region].items()}
        missing = [name for name in NEEDED if name not in usd]
        if missing:
            raise PlanError(f"the prices file {path} lacks {', '.join(missing)} for {region}")
        hours = data.get("hours_per_month", 730)
        return cls(str(path), str(data.get("as_of", "undated")), float(hours), usd)

    def instance(self, name: str) -> float:
        return self.usd[f"rds_{name}_hour"]  # one of INSTANCES: checked when read


def price(path: Path, region: str, name: str, item: Any) -> float:
    if not isinstance(item, dict) or not isinstance(item.get("source"), str):
        raise PlanError(f"the prices file {path}: {region} {name} needs usd, per and source")
    usd = item.get("usd")
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not usd >= 0:
        raise PlanError(f"the prices file {path}: {region} {name} usd must be a number >= 0")
    return float(usd)


def tiered(amount: float, first: float, below: float, above: float) -> float:
    return min(amount, first) * below + max(0.0, amount - first) * above


@dataclass
class Bill:
    lines: dict[str, float]
    notes: list[str]
    requests_per_month: float
    provisioned_replies: bool = False  # the reply table provisioned (cheaper), not on demand

    @property
    def total(self) -> float:
        return sum(self.lines.values())

    @property
    def per_million(self) -> float:
        return self.total / (self.requests_per_month / 1e6)

    def to_json(self) -> dict[str, Any]:
        return {
            "lines": {name: round(usd, 2) for name, usd in self.lines.items()},
            "total_usd_per_month": round(self.total, 2),
            "usd_per_million_requests": round(self.per_million, 4),
            "notes": self.notes,
        }


def bill(
    load: Traffic,
    sizing: Sizing,
    calls: dict[str, float],
    prices: Prices,
    reply_units: dict[str, float] | None = None,
) -> Bill:
    """The month's cost of `sizing` serving `load`, `calls` a second being its AWS calls at
    the mean rate, and `reply_units` the reply table's read and write units a second there
    (measured; without them, estimated from the calls)."""
    usd, hours = prices.usd, prices.hours
    requests = load.rps * MONTH_S
    scale = load.rps / sizing.peak_rps  # records at the mean (an upper bound with front frames)
    records = sizing.records_per_s * scale * MONTH_S
    out = Bill({}, [], requests)
    if sizing.edge is EdgeKind.ATOMIC:
        lambda_lines(out, requests, sizing, prices)
        writes = requests * usd["dynamodb_write_per_million"] / 1e6
        out.lines["DynamoDB counter table (UpdateItem ADD)"] = writes
        return out
    if sizing.edge is EdgeKind.LAMBDA:
        lambda_lines(out, requests, sizing, prices)
    else:
        tasks = sizing.edge_tasks * hours
        out.lines["Fargate edge tasks"] = tasks * (
            EDGE_TASK_VCPU * usd["fargate_arm64_vcpu_hour"]
            + EDGE_TASK_GB * usd["fargate_arm64_gb_hour"]
        )
        out.lines["Application Load Balancer"] = hours * usd["alb_hour"]  # its LCUs: whole.py
    kinesis(out, sizing, records, prices)
    reply_table(out, sizing, prices, reply_units or per_record(sizing, calls, scale))
    instance = prices.instance(sizing.instance_class)
    out.lines[f"RDS Postgres {sizing.instance_class}, Multi-AZ"] = 2 * (
        instance * hours + RDS_STORAGE_GB * usd["rds_gp3_gb_month"]
    )
    out.lines["Fargate batchers"] = (
        sizing.batchers
        * hours
        * (
            BATCHER_VCPU * usd["fargate_arm64_vcpu_hour"]
            + BATCHER_GB * usd["fargate_arm64_gb_hour"]
        )
    )
    out.lines["CloudWatch metrics and alarms"] = (
        CUSTOM_METRICS * usd["cloudwatch_metric_month"] + ALARMS * usd["cloudwatch_alarm_month"]
    )
    return out


def per_record(sizing: Sizing, calls: dict[str, float], scale: float) -> dict[str, float]:
    """The reply table's units a second estimated from the calls, for an older measured.json
    that has no `reply_units`: an item per record, every waiting key read per poll."""
    reads = calls.get("batch_get_item", 0.0) + calls.get("get_item", 0.0)
    if sizing.edge is EdgeKind.SERVER:  # one poll reads every reply its process waits for
        edges = max(1, sizing.edge_tasks)
        reads *= max(1.0, sizing.records_per_s * scale / edges * sizing.reply_wait_s)
    return {"write": sizing.records_per_s * scale, "read": reads}


def reply_table(
    out: Bill,
    sizing: Sizing,
    prices: Prices,
    units: dict[str, float],
) -> None:
    """The reply table's line, the cheaper of on demand (`units`, its write and read units a
    second at the mean rate) and provisioned (`sizing.reply_capacity`, the peak's units at the
    auto scaling target, all month: target tracking only adds to it); the other in a note."""
    usd, hours = prices.usd, prices.hours
    per_s = units["write"] * usd["dynamodb_write_per_million"]
    per_s += units["read"] * usd["dynamodb_read_per_million"]
    on_demand = MONTH_S / 1e6 * per_s
    held = sizing.reply_capacity or {"write": 1, "read": 1}  # plan() sizes it
    provisioned = hours * (
        held["write"] * usd["dynamodb_wcu_hour"] + held["read"] * usd["dynamodb_rcu_hour"]
    )
    if provisioned < on_demand:
        out.lines["DynamoDB reply table, provisioned"] = provisioned
        out.provisioned_replies = True
        out.notes.append(f"the reply table on demand would cost ${on_demand:,.0f} a month")
    else:
        out.lines["DynamoDB reply table, on demand"] = on_demand
        out.notes.append(
            f"the reply table provisioned ({held['write']:,} write, {held['read']:,} read "
            f"units) would cost ${provisioned:,.0f} a month"
        )


def lambda_lines(out: Bill, requests: float, sizing: Sizing, prices: Prices) -> None:
    usd = prices.usd
    millions = requests / 1e6
    if not sizing.url:  # a function URL costs nothing of its own
        out.lines["API Gateway HTTP API"] = tiered(
            millions,
            300,
            usd["api_gateway_http_per_million"],
            usd["api_gateway_http_per_million_over_300m"],
        )
    out.lines["Lambda requests"] = millions * usd["lambda_per_million"]
    seconds = requests * sizing.duration_s * sizing.memory_mb / 1024
    out.lines["Lambda duration"] = tiered(
        seconds,
        7.5e9,
        usd["lambda_arm64_gb_second"],
        usd["lambda_arm64_gb_second_over_7500m"],
    )
    # CloudWatch Logs: numerator/plan/whole.py. template.yaml's LoggingConfig (system logs at
    # WARN) leaves out a Lambda's START, END and REPORT lines.


ON_DEMAND_SHARDS = 4
"""The shards an on-demand stream starts with (4 MB/s of writes); it adds more for its
throughput, never for a latency."""


def kinesis(out: Bill, sizing: Sizing, records: float, prices: Prices) -> None:
    """The cheaper of a provisioned stream of `sizing.shards` and an on-demand one; the other
    in a note. Provisioned where the shards are more than the records need and an on-demand
    stream would have (a server edge's for its p95: numerator/plan/latency.py)."""
    usd, hours = prices.usd, prices.hours
    units = math.ceil(max(sizing.record_bytes, 1) / 25_600)
    provisioned = (
        sizing.shards * hours * usd["kinesis_shard_hour"]
        + records * units / 1e6 * usd["kinesis_put_payload_units_per_million"]
    )
    gigabytes = records * max(1024.0, sizing.record_bytes) / 1e9
    on_demand = hours * usd["kinesis_on_demand_stream_hour"] + gigabytes * (
        usd["kinesis_on_demand_gb_written"] + usd["kinesis_on_demand_gb_read"]
    )
    held = sizing.shards > max(ON_DEMAND_SHARDS, sizing.rate_shards)
    if held:
        out.lines["Kinesis, provisioned shards"] = provisioned
        kept = max(ON_DEMAND_SHARDS, sizing.rate_shards)
        out.notes.append(
            f"Kinesis provisioned: {sizing.shards} shards for the p95, where on demand "
            f"(${on_demand:,.0f} a month) would keep {kept}"
        )
    elif provisioned <= on_demand:
        out.lines["Kinesis, provisioned shards"] = provisioned
        out.notes.append(f"Kinesis on demand would cost ${on_demand:,.0f} a month")
    else:
        out.lines["Kinesis, on demand"] = on_demand
        out.notes.append(
            f"Kinesis provisioned ({sizing.shards} shards) would cost ${provisioned:,.0f} a month"
        )


def fan_out(load: Traffic, sizing: Sizing, prices: Prices, faster_s: float) -> dict[str, float]:
    """What reading the stream with enhanced fan-out would cost a month (one registered
    consumer, on every shard, and the bytes it reads), and what its `faster_s` shorter wait
    saves of a Lambda edge's duration; {} when the prices file has no fan-out prices."""
    usd = prices.usd
    if "kinesis_efo_consumer_shard_hour" not in usd or "kinesis_efo_gb_retrieved" not in usd:
        return {}
    records = sizing.records_per_s * load.rps / sizing.peak_rps * MONTH_S
    gigabytes = records * max(sizing.record_bytes, 1) / 1e9
    cost = (
        sizing.shards * prices.hours * usd["kinesis_efo_consumer_shard_hour"]
        + gigabytes * usd["kinesis_efo_gb_retrieved"]
    )
    saves = 0.0
    if sizing.edge is EdgeKind.LAMBDA:
        seconds = load.rps * MONTH_S * faster_s * sizing.memory_mb / 1024
        saves = seconds * usd["lambda_arm64_gb_second"]
    return {"usd_per_month": cost, "saves_lambda_duration_usd_per_month": saves}
