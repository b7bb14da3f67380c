"""The bill's lines past the service's own AWS calls: what a deployment of template.yaml pays
around them. CloudWatch Logs (from the bytes each edge logs, measured: `plan --measure-logs`),
the private subnets' way to the AWS APIs (NAT gateways or VPC endpoints, the cheaper), data
transfer out to the clients (from the bytes of an answer, measured), the load balancer's
capacity units (with new connections a second an input), and a burstable Postgres instance's CPU
credits (or a non-burstable class where they would cost more). What none of the lines price is
listed in NOT_PRICED, and printed.
"""

from __future__ import annotations

from typing import Any

from numerator.plan.cost import INSTANCES, Bill, Prices
from numerator.plan.model import HEADROOM, MONTH_S, EdgeKind, Sizing, Traffic

# Assumptions (not measured here), each named where it is used:
ALB_BYTES_PER_REQUEST = 600  # a /next request and its answer, headers included
AWS_CALL_BYTES = 1_500  # a signed AWS API request and its answer, headers included, on the wire
WIRE_BYTES = 90  # an answer's TCP/IP headers and TLS record past its HTTP bytes
AZS = 2  # template.yaml's subnets: two Availability Zones, a NAT gateway or an endpoint in each
INTERFACE_ENDPOINTS = ("kinesis-streams", "secretsmanager", "logs", "ecr.api", "ecr.dkr")
"""What the tasks and the Lambdas in the VPC call, but DynamoDB and S3, which take a gateway
endpoint at no charge (counted so with either way)."""
DYNAMODB_CALLS = ("batch_get_item", "batch_write_item", "get_item", "query", "update_item")
LOG_RETENTION_DAYS = 30  # template.yaml's log groups
REQUESTS_PER_CONNECTION = 100
"""`--new-connections`'s default: a client keeps its connection for this many requests."""
CONNECTION_S = 60.0  # an ALB connection stays open its idle timeout (60 s) after its last request
POSTGRES_CPU_MS = 0.46
"""A frame's transaction's CPU on the Postgres instance, ms of one vCPU, taken as a core here:
`numerator bench --local --schedule 'const(1500,12s)' --mix uniform --counters 10`, 2026-12-04,
Postgres at 10.2 % of a core for 2,661 transactions in 12 s (its background work included, so
an upper bound); the AWS path's batchers run the same statement."""
BURSTABLE = {"db.t4g.micro": (2, 0.10), "db.t4g.small": (2, 0.20)}
"""A burstable class's vCPUs and the baseline share of each it may use without credits."""

NOT_PRICED = (
    "a custom domain (Route 53, ACM), AWS WAF and Shield Advanced",
    "the Secrets Manager secret ($0.40 a month) and its calls; KMS keys of your own",
    "S3 for the anchored chain heads (a few PUTs a minute, kilobytes)",
    "the ECR image's storage; RDS backups past the instance's storage, snapshots and "
    "Performance Insights",
    "traffic between Availability Zones (the batchers' and tasks' to Postgres: $0.01 a GB each "
    "way)",
    "the reply table's target-tracking alarms (four a policy) and CloudWatch dashboards past three",
    "the processes' own occasional log lines (a container's start, a lease taken over)",
    "free tiers, savings plans, reserved instances, support plans and taxes",
)


def whole_bill(
    out: Bill,
    load: Traffic,
    sizing: Sizing,
    calls: dict[str, float],
    prices: Prices,
    measured: dict[str, Any],
) -> None:
    """Add the lines past the service's own calls to `out`, and their notes."""
    if not measured.get("log_bytes"):
        out.notes.append(
            "the bytes logged a request and an answer's are not in measured.json (numerator plan "
            "--measure-logs measures them): logs and transfer out are priced without them"
        )
    logs(out, load, sizing, prices, measured.get("log_bytes") or {})
    if sizing.edge is EdgeKind.SERVER:
        alb(out, load, prices)
    if sizing.edge is not EdgeKind.ATOMIC:  # the atomic counter's Lambda needs no VPC
        subnets(out, load, sizing, calls, prices)
    transfer(out, load, prices, measured.get("log_bytes") or {})
    if sizing.edge is not EdgeKind.ATOMIC and sizing.instance_class in BURSTABLE:
        credits(out, sizing, prices)


def logs(
    out: Bill, load: Traffic, sizing: Sizing, prices: Prices, measured: dict[str, float]
) -> None:
    """CloudWatch Logs: the bytes logged a request (measured), and each process's EMF line an
    interval (60 s in the template): a Lambda container's, an edge task's, a batcher's."""
    usd = prices.usd
    per_request = float(measured.get(str(sizing.edge), 0.0))
    line = float(measured.get(f"{sizing.edge}_emf_line") or measured.get("lambda_emf_line", 0.0))
    if sizing.edge is EdgeKind.LAMBDA:
        processes = load.rps * sizing.duration_s + sizing.batchers  # containers busy at the mean
    elif sizing.edge is EdgeKind.SERVER:
        processes = sizing.edge_tasks + sizing.batchers
    else:
        processes, line = 0.0, 0.0  # the stand-in writes no metrics
    ingested = (load.rps * per_request + processes * line / 60) * MONTH_S / 1e9
    stored = ingested * LOG_RETENTION_DAYS * 86_400 / MONTH_S
    out.lines["CloudWatch Logs (taken in, 30 days kept)"] = (
        ingested * usd["cloudwatch_logs_gb"] + stored * usd["cloudwatch_logs_stored_gb_month"]
    )
    if sizing.edge is EdgeKind.ATOMIC:
        out.notes.append(
            f"CloudWatch Logs: its stand-in (bench/atomic.py) logs {per_request:g} bytes a request "
            "(measured) and writes no metrics lines"
        )
        return
    out.notes.append(
        f"CloudWatch Logs: {per_request:g} bytes logged a request that works (measured: numerator "
        f"plan --measure-logs) and a {line:g}-byte EMF line a minute from each of "
        f"{processes:,.0f} processes: {ingested:,.1f} GB a month"
    )


def subnets(
    out: Bill, load: Traffic, sizing: Sizing, calls: dict[str, float], prices: Prices
) -> None:
    """The private subnets' way to Kinesis, Secrets Manager, CloudWatch Logs and ECR: NAT
    gateways or interface endpoints, the cheaper counted and the other noted (DynamoDB's and
    S3's gateway endpoints cost nothing either way)."""
    usd, hours = prices.usd, prices.hours
    through = sum(n for call, n in calls.items() if call not in DYNAMODB_CALLS)
    records = sizing.records_per_s * load.rps / sizing.peak_rps
    per_s = through * AWS_CALL_BYTES + 2 * records * sizing.record_bytes  # put, and read
    gigabytes = per_s * MONTH_S / 1e9
    nat = AZS * hours * usd["nat_gateway_hour"] + gigabytes * usd["nat_gateway_gb"]
    endpoints = (
        len(INTERFACE_ENDPOINTS) * AZS * hours * usd["vpc_interface_endpoint_hour"]
        + gigabytes * usd["vpc_interface_endpoint_gb"]
    )
    said = f"{gigabytes:,.0f} GB a month of AWS calls from the private subnets"
    if nat <= endpoints:
        out.lines[f"NAT gateways ({AZS})"] = nat
        out.notes.append(f"{said}; VPC interface endpoints would cost ${endpoints:,.0f} a month")
    else:
        out.lines[f"VPC interface endpoints ({len(INTERFACE_ENDPOINTS)} in {AZS} AZs)"] = endpoints
        out.notes.append(f"{said}; NAT gateways ({AZS}) would cost ${nat:,.0f} a month")


TRANSFER_TIERS = (  # GB a month in each tier, and its price's name
    (10_240.0, "transfer_out_gb_first_10tb"),
    (40_960.0, "transfer_out_gb_next_40tb"),
    (102_400.0, "transfer_out_gb_next_100tb"),
    (float("inf"), "transfer_out_gb_over_150tb"),
)


def transfer(out: Bill, load: Traffic, prices: Prices, measured: dict[str, float]) -> None:
    """Data transfer out to the internet: each answer's bytes (measured) and its wire's."""
    answer = float(measured.get("response_bytes") or 0.0) + WIRE_BYTES
    left = load.rps * MONTH_S * answer / 1e9
    usd = 0.0
    for size, name in TRANSFER_TIERS:
        taken = min(left, size)
        usd += taken * prices.usd[name]
        left -= taken
    out.lines["Data transfer out"] = usd


def alb(out: Bill, load: Traffic, prices: Prices) -> None:
    """The load balancer's capacity units, all month at the mean rate's."""
    gb_per_hour = load.rps * ALB_BYTES_PER_REQUEST * 3600 / 1e9
    lcus, by = alb_lcus(load, gb_per_hour)
    out.lines["ALB capacity units (LCUs)"] = lcus * prices.hours * prices.usd["alb_lcu_hour"]
    out.notes.append(
        f"the load balancer: {lcus:,.1f} LCUs, set by its {by} ({new_connections(load):,.0f} new "
        "connections a second: --new-connections)"
    )


def alb_lcus(load: Traffic, gb_per_hour: float) -> tuple[float, str]:
    """An ALB's capacity units an hour (the largest of its dimensions) and the one that sets
    them: new connections (25 a second an LCU), active ones (3,000), bytes (1 GB an hour)."""
    new = new_connections(load)
    dimensions = {
        "new connections": new / 25,
        "active connections": new * CONNECTION_S / 3000,
        "bytes processed": gb_per_hour,
    }
    name = max(dimensions, key=lambda k: dimensions[k])
    return max(1.0, dimensions[name]), name


def new_connections(load: Traffic) -> float:
    return (
        load.new_connections
        if load.new_connections is not None
        else load.rps / REQUESTS_PER_CONNECTION
    )


def postgres_cpu(sizing: Sizing) -> float:
    """vCPUs the frames' transactions keep busy at the peak."""
    return sizing.transactions_per_s * POSTGRES_CPU_MS / 1000


def instance_class(sizing: Sizing, commits: float, prices: Prices) -> str:
    """The cheapest class that holds the peak's transactions: a burstable db.t4g.small while
    one connection's commit rate here holds them (HEADROOM) and its CPU credits past its
    baseline cost less than a non-burstable class, else db.m7g.large."""
    burstable, steady = INSTANCES[1], INSTANCES[2]
    if sizing.transactions_per_s > commits * HEADROOM:
        return steady
    vcpus, baseline = BURSTABLE[burstable]
    need = postgres_cpu(sizing)
    if need > vcpus * HEADROOM:
        return steady
    credit = max(0.0, need - vcpus * baseline) * prices.usd["rds_cpu_credit_vcpu_hour"]
    multi_az = 2  # the standby runs no transactions: no credits
    if multi_az * prices.instance(burstable) + credit > multi_az * prices.instance(steady):
        return steady
    return burstable


def credits(out: Bill, sizing: Sizing, prices: Prices) -> None:
    """A burstable instance (T4g, unlimited: RDS's default) past its baseline pays for the CPU
    it takes above it, at the peak's transactions all month (an upper bound)."""
    vcpus, baseline = BURSTABLE[sizing.instance_class]
    need = postgres_cpu(sizing)
    above = max(0.0, need - vcpus * baseline)
    out.notes.append(
        f"Postgres CPU: {need:.2f} vCPU at the peak's {sizing.transactions_per_s:,.0f} "
        f"transactions a second ({POSTGRES_CPU_MS:g} ms each), against {sizing.instance_class}'s "
        f"baseline of {vcpus * baseline:.1f}"
    )
    out.lines[f"RDS CPU credits ({sizing.instance_class} past its baseline)"] = (
        above * prices.hours * prices.usd["rds_cpu_credit_vcpu_hour"]
    )
