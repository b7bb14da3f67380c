"""What a rate needs on AWS: shards, batchers, edge tasks or Lambda concurrency, Postgres
transactions, and the AWS calls each second, by call.

The calls come from the bench, not from a guess: `numerator plan --measure` runs `numerator bench
--aws moto` at two or three rates per edge and keeps, per call, what it made each second
(measured.json). A call is made either per request (the slope) or per unit of the deployment
whatever the rate (the intercept): per front frame (its PutRecords, its reply item and the Query
that reads it; an edge process puts one at each shard's read, at most one a FRONT_FRAME_MS:
`front_frames_per_s`, its second chance at the read's put counted with it, as the fit finds it:
two PutRecords a unit on shared beats), per shard (the batcher's reads and its reply writes), or
per process (health checks). Fitting both by least squares through the rates, and scaling the
intercept by the units a deployment has, is the whole model; the test in
tests/e2e/test_plan.py holds it against bench runs at other rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from infra.adapters.limits import SHARD_BYTES_PER_S, SHARD_READS_PER_S, SHARD_RECORDS_PER_S
from infra.errors import NumeratorError

KINESIS_ON_DEMAND_START = 4_000  # records a second a new on-demand stream takes at first
LAMBDA_CONCURRENCY = 1_000  # an account's default concurrent executions, per region
HTTP_API_RPS = 10_000  # API Gateway's default account throttle, per region (burst 5,000)
DYNAMODB_ON_DEMAND_START = 4_000  # write units a second a new on-demand table takes at first
DYNAMODB_PARTITION_WRITES = 1_000  # write units a second one partition (so one item) takes
DYNAMODB_TABLE_UNITS = 40_000  # provisioned read (and write) units one table may have (default)
REPLY_TARGET = 0.7  # template.yaml's ReplyTable auto scaling target (ReplyTableMode PROVISIONED)
HEADROOM = 0.7  # size to this share of a limit; a limit is "approached" beyond it
TASK_CPU_TARGET = 0.6  # the edge tasks' CPU target tracking aims here
CHANCE_S = 0.015
"""How long a server edge's second chance at a beat gathers: from the beat's frame's close to
its own, twice the put's mean deviation (functions/front.py; 10-15 ms on moto)."""
SHARDS_PER_BATCHER = 4  # shards one batcher reads (each its own frame, one transaction each)
MONTH_S = 730 * 3600
LAMBDA_MEMORY_MB = 512  # template.yaml EdgeMemory's default
MEMORIES_MB = (256, 512, 1024)
"""The sizes the plan prices a Lambda at, beside its own: 128 MB would leave the edge's container
(85 MB at its peak here, one container in a process) too little room."""
MEMORY_MB = (128, 10_240)  # the least and most memory a Lambda takes (template.yaml's EdgeMemory)
VCPU_MB = 1769
"""A Lambda has CPU in proportion to its memory, one vCPU at 1,769 MB (AWS Lambda Developer Guide,
"Configuring Lambda function memory")."""
MEASURED = Path(__file__).with_name("measured.json")  # numerator plan --measure writes it


class PlanError(NumeratorError):
    """Bad input to the plan: a rate, an edge, a prices file. The message names it."""


class EdgeKind(StrEnum):
    """How requests reach the numbers: numerator's two edges, and the baseline beside them."""

    LAMBDA = "lambda"
    SERVER = "server"
    ATOMIC = "atomic"  # not numerator: Lambda and one DynamoDB UpdateItem ADD per request


class Unit(StrEnum):
    """What a call's fixed part is made per, whatever the rate."""

    FRONT = "front frame"  # a server edge's: all its edge processes' front frames a second
    FRONT_ITEM = "front frame's reply item"  # FRONT times the items a frame's replies make
    SHARD = "shard"
    PROCESS = "process"


REPLY_UNITS = {"read": Unit.FRONT, "write": Unit.FRONT_ITEM}
"""The reply table's capacity units: each front frame's replies written as one item per batcher
that reads its records (REPLY_ITEMS=frame, a batcher's shards' frames of one beat gathered:
batcher/gather.py; on phased beats a frame goes to one shard, so one item), and read by one
Query of its edge's partition at the beat. The Lambda edge has no front frames: its units are
per request (one item each, read by key)."""


WRITE_BATCH = 25  # replies a BatchWriteItem (infra/adapters/dynamodb.py)
UNITS = {
    "put_record": Unit.FRONT,
    "put_records": Unit.FRONT,
    "batch_get_item": Unit.FRONT,
    "get_item": Unit.FRONT,
    "query": Unit.FRONT,
    "get_records": Unit.SHARD,
    "get_shard_iterator": Unit.SHARD,
    "list_shards": Unit.PROCESS,  # each process's, now and then (and each Lambda container's)
    "batch_write_item": Unit.SHARD,  # a back frame's replies (phased: no two share a beat)
}  # any other call (describe_*: health checks): Unit.PROCESS


def bytes_shards(sizing: Sizing) -> int:
    """The shards a sizing's records need for their bytes."""
    return math.ceil(sizing.records_per_s * sizing.record_bytes / (SHARD_BYTES_PER_S * HEADROOM))


def unit_of(call: str) -> Unit:
    return UNITS.get(call, Unit.PROCESS)


def units(
    edges: float, shards: float, batchers: float, fronts: float, phased: bool = False
) -> dict[Unit, float]:
    """A deployment's units: its edges' front frames a second (`fronts` each) and the reply items
    they make (on shared beats a frame's records, one a counter, spread over the shards, and
    each batcher holding some writes an item: as many as there are batchers, or shards if
    fewer), its shards, and all its processes."""
    items = 1.0 if phased else max(1.0, min(batchers, shards))
    return {
        Unit.FRONT: edges * fronts,
        Unit.FRONT_ITEM: edges * fronts * items,
        Unit.SHARD: shards,
        Unit.PROCESS: edges + batchers,
    }


def front_frames_per_s(
    shards: float, interval: float, front_frame_s: float, policy: str, phased: bool
) -> float:
    """One busy edge process's front frames a second (FRONT_FRAME_POLICY, functions/front.py):
    one a FRONT_FRAME_MS (fixed, auto); on the beats one a read, each at the first read at least
    FRONT_FRAME_MS after the last: a read every `interval` (shared beats) or every `interval` /
    `shards` (phased beats, a shard read after another)."""
    if policy != "beats" or interval <= 0:
        return 1 / front_frame_s
    gap = interval / max(1.0, shards) if phased else interval
    return 1 / (gap * math.ceil(front_frame_s / gap - 1e-9))


@dataclass(frozen=True)
class Traffic:
    """The rate to plan for and its shape. `rps` is the mean; capacity is sized for the peak."""

    rps: float
    counters: int = 10
    hot_share: float = 0.5  # of requests, on the busiest counter
    count: int = 1  # values per request
    peak_to_mean: float = 2.0
    new_connections: float | None = None  # a second at the load balancer (None: whole.py's)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rps) and self.rps > 0):
            raise PlanError(f"--rps must be a positive number of requests a second, not {self.rps}")
        if self.counters < 1:
            raise PlanError(f"--counters must be at least 1, not {self.counters}")
        if not 0 < self.hot_share <= 1:
            raise PlanError(f"--hot-share must be above 0 and at most 1, not {self.hot_share}")
        if self.counters == 1 and self.hot_share != 1:
            raise PlanError("--hot-share must be 1 with one counter (it takes every request)")
        if not 1 <= self.count <= 1000:
            raise PlanError(f"--count must be from 1 to 1000, not {self.count}")
        if not (math.isfinite(self.peak_to_mean) and self.peak_to_mean >= 1):
            raise PlanError(f"--peak-to-mean must be at least 1, not {self.peak_to_mean}")
        new = self.new_connections
        if new is not None and not (math.isfinite(new) and new >= 0):
            raise PlanError(f"--new-connections must be a number a second, at least 0, not {new}")

    @property
    def peak(self) -> float:
        return self.rps * self.peak_to_mean


@dataclass(frozen=True)
class Fit:
    """One call's calls a second: `fixed` per unit, plus `per_request` per request."""

    fixed: float
    per_request: float

    def at(self, rps: float, units: float) -> float:
        return self.fixed * units + self.per_request * rps


def fit(points: list[tuple[float, float]], units: float) -> Fit:
    """Least squares through the (rps, calls a second) points of runs on `units` units; a
    negative intercept is fitted through the origin, a negative slope as a constant."""
    through_origin = Fit(0.0, sum(x * y for x, y in points) / sum(x * x for x, _ in points))
    if units == 0:  # no fixed part (a Lambda edge's calls are each request's)
        return through_origin
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    intercept = mean_y - slope * mean_x
    if slope < 0:
        return Fit(mean_y / units, 0.0)
    if intercept < 0:
        return through_origin
    return Fit(intercept / units, slope)


@dataclass(frozen=True)
class Measured:
    """What the bench measured for one edge (measured.json), and the fits made of it."""

    edge: EdgeKind
    runs: list[dict[str, Any]]
    fits: dict[str, Fit] = field(default_factory=dict)
    replies: dict[str, Fit] = field(default_factory=dict)
    """The reply table's capacity units a second, read and written (REPLY_UNITS), when the
    runs measured them."""

    @classmethod
    def of(cls, edge: EdgeKind, runs: list[dict[str, Any]]) -> Measured:
        if len({run["rps"] for run in runs}) < 2:
            raise PlanError(f"measured.json: the {edge} edge needs runs at two rates at least")
        calls = sorted({call for run in runs for call in run["calls"]})
        have = measured_units(runs[0])
        fits = {
            call: fit(
                [(run["rps"], run["calls"].get(call, 0.0) / run["duration_s"]) for run in runs],
                have[unit_of(call)],
            )
            for call in calls
        }
        replies = {
            op: fit(
                [(run["rps"], run["reply_units"][op] / run["duration_s"]) for run in runs],
                have[unit],
            )
            for op, unit in REPLY_UNITS.items()
            # measured (0 is a measure: a server edge whose replies were all pushed read none)
            if all(op in run.get("reply_units", {}) for run in runs)
        }
        return cls(edge, runs, fits, replies)

    def calls(
        self, rps: float, units: dict[Unit, float], interval: float = 0.2
    ) -> dict[str, float]:
        """Calls a second by call at `rps` on a deployment of `units`. The Lambda edge's reply
        writes are worked out, not fitted: a BatchWriteItem per frame, 25 replies a call (at
        the bench's few requests a second, a frame holds one or two)."""
        out = {call: fit.at(rps, units[unit_of(call)]) for call, fit in self.fits.items()}
        if self.edge is EdgeKind.LAMBDA and "batch_write_item" in out:
            frames = back_frames_per_s(rps, units[Unit.SHARD], interval)
            out["batch_write_item"] = frames + max(0.0, rps - frames) / WRITE_BATCH
        return out

    def reply_units(self, rps: float, units: dict[Unit, float]) -> dict[str, float]:
        """The reply table's read and write units a second at `rps` on a deployment of
        `units`; empty when the runs did not measure them."""
        return {op: f.at(rps, units[REPLY_UNITS[op]]) for op, f in self.replies.items()}

    def least(self, key: str) -> float:
        """The least of the runs' figure: the reply wait without any queueing."""
        return float(min(run[key] for run in self.runs))

    def mean(self, key: str) -> float:
        return sum(float(run[key]) for run in self.runs) / len(self.runs)

    def rps_per_task(self, target: float) -> float:
        """Requests a second one edge process serves at `target` CPU (0 to 1): its CPU fitted
        as a fixed part (polling, health) plus a part per request, from the runs."""
        cpu = edge_cpu(self.runs)
        if cpu.per_request <= 0 or cpu.fixed >= target:
            raise PlanError(f"measured.json: the {self.edge} edge's CPU does not grow with rps")
        return (target - cpu.fixed) / cpu.per_request


def back_frames_per_s(records_per_s: float, shards: float, interval: float) -> float:
    """Frames a second: one per shard per read that finds records (each shard read every
    `interval`), the records coming at random (Poisson)."""
    reads = shards / interval if interval > 0 else 0.0
    return reads * -math.expm1(-records_per_s / reads) if reads > 0 else 0.0


def read_wait(interval: float, shards: int, phased: bool) -> float:
    """A record's mean wait for its read, from its put's return: half the interval on shared
    beats; on phased beats half the gap between two shards' phases, past the put's margin
    (infra/adapters/beats.py), on a stream split evenly into `shards`."""
    return interval / 2 / (max(1, shards) if phased else 1)


def edge_cpu(runs: list[dict[str, Any]]) -> Fit:
    """An edge process's CPU (0 to 1 of a core) fitted through the runs: a fixed part (polls,
    health) plus a part per request."""
    return fit([(run["rps"], run["edge_cpu_pct"] / 100) for run in runs], 1.0)


def measured_units(run: dict[str, Any]) -> dict[Unit, float]:
    """The units of the deployment the bench measured (a run that does not say its front frames'
    policy had fixed ones: the default before beats)."""
    shards, phased = float(run["shards"]), run.get("read_beats") == "phased"
    fronts = front_frames_per_s(
        shards,
        float(run.get("read_interval_ms", 200)) / 1000,
        float(run.get("front_frame_ms") or 20) / 1000,
        run.get("front_frame_policy", "fixed"),
        phased,
    )
    return units(float(run["edge_processes"]), shards, float(run["batchers"]), fronts, phased)


def distinct(requests: float, load: Traffic) -> tuple[float, float]:
    """Expected counters, and the hot one's chance, among `requests` requests of a front frame:
    the hot counter takes `hot_share`, the others the rest evenly."""
    hot = 1 - (1 - load.hot_share) ** requests
    others = load.counters - 1
    if others == 0:
        return hot, hot
    each = (1 - load.hot_share) / others
    return hot + others * (1 - (1 - each) ** requests), hot


@dataclass
class Sizing:
    edge: EdgeKind
    peak_rps: float
    edge_tasks: int = 0  # server: 1-vCPU Fargate tasks
    concurrency: float = 0.0  # lambda: concurrent executions at the peak (Little's law)
    in_flight: float = 0.0  # requests waiting for their reply at the peak
    reply_wait_s: float = 0.0
    """The reply wait the plan bills and sizes by: the least the bench measured, and for an edge
    on phased beats its wait for the read at this stream's shards, not the bench's."""
    measured_wait_s: float = 0.0  # the least reply wait the bench measured
    records_per_s: float = 0.0
    hot_records_per_s: float = 0.0
    record_bytes: float = 0.0
    shards: int = 1
    rate_shards: int = 1  # the shards its records alone need (`shards` may hold more: a p95's)
    partition_spread: int = 1
    batchers: int = 2
    transactions_per_s: float = 0.0
    instance_class: str = ""
    rps_per_task: float = 0.0
    fronts_per_s: float = 0.0  # server: one edge task's front frames a second
    phased: bool = False  # shards read on phased beats (READ_BEATS)
    reply_writes_per_s: float = 0.0  # the reply table's write units at the peak, when measured
    reply_capacity: dict[str, int] = field(default_factory=dict)
    """A provisioned reply table's read and write units: the peak's at REPLY_TARGET."""
    invocation_cpu_s: float = 0.0  # a Lambda's CPU a warm invocation, on a whole core (measured)
    memory_mb: int = LAMBDA_MEMORY_MB
    url: bool = False  # a Lambda reached by its function URL (FunctionUrl=true), not API Gateway

    @property
    def duration_s(self) -> float:
        """A Lambda's billed time an invocation: its wait, and its CPU at the share of a vCPU
        its memory buys (the bench runs it on a whole core, so the wait holds one core's worth
        of it already)."""
        return self.reply_wait_s + self.invocation_cpu_s * max(0.0, VCPU_MB / self.memory_mb - 1)

    def units(self) -> dict[Unit, float]:
        # no edge tasks (and no front frames) off the server
        return units(self.edge_tasks, self.shards, self.batchers, self.fronts_per_s, self.phased)


def capacity(peak_units: dict[str, float]) -> dict[str, int]:
    """A provisioned reply table's units for `peak_units` a second: the peak at the auto
    scaling target, so that the peak is what the target tracking aims at, not over it."""
    return {op: max(1, math.ceil(n / REPLY_TARGET)) for op, n in sorted(peak_units.items())}


def size(
    load: Traffic,
    measured: Measured,
    record_bytes: float,
    front_frame_ms: float,
    interval: float = 0.2,
    invocation_cpu_ms: float = 0.0,
    memory_mb: int = LAMBDA_MEMORY_MB,
    policy: str = "beats",
    phased: bool = False,
    least_shards: int = 1,
) -> Sizing:
    """The deployment for the load's peak; `interval`: READ_INTERVAL_MS, in seconds; a Lambda's
    CPU a warm invocation on a whole core (measured), and its memory; the server edge's
    FRONT_FRAME_POLICY, and whether shards are read on phased beats (READ_BEATS); `least_shards`:
    the shards its latency asks for at least (numerator/plan/latency.py, `server_shards`)."""
    peak = load.peak
    out = Sizing(measured.edge, peak, record_bytes=record_bytes, phased=phased)
    quickest = min(measured.runs, key=lambda run: float(run["latency_mean_ms"]))
    out.reply_wait_s = out.measured_wait_s = quickest["latency_mean_ms"] / 1000
    out.invocation_cpu_s, out.memory_mb = invocation_cpu_ms / 1000, memory_mb
    out.in_flight = peak * out.reply_wait_s
    if measured.edge is EdgeKind.ATOMIC:  # one item per counter, no stream, no Postgres
        out.concurrency = peak * out.duration_s
        out.shards = out.batchers = 0
        out.hot_records_per_s = peak * load.hot_share  # the hot counter's item's writes
        return out
    if measured.edge is EdgeKind.SERVER:
        out.rps_per_task = measured.rps_per_task(TASK_CPU_TARGET)
        out.edge_tasks = max(2, math.ceil(peak / out.rps_per_task))
        # the shards for the most frames an edge puts: one a beat on shared beats, whatever the
        # shards; on phased beats one a FRONT_FRAME_MS at most, and then its frames on them
        beat = front_frames_per_s(1, interval, front_frame_ms / 1000, policy, phased=False)
        first = 1000 / front_frame_ms if phased else beat
        front_records(out, load, first, second_chances(first, front_frame_ms / 1000, policy))
    else:
        out.records_per_s = peak
        out.hot_records_per_s = peak * load.hot_share
    write = SHARD_RECORDS_PER_S * HEADROOM
    out.partition_spread = max(1, math.ceil(out.hot_records_per_s / write))
    out.rate_shards = max(
        1, out.partition_spread, math.ceil(out.records_per_s / write), bytes_shards(out)
    )
    out.shards = max(least_shards, out.rate_shards)
    out.batchers = max(2, math.ceil(out.shards / SHARDS_PER_BATCHER))
    if measured.edge is EdgeKind.SERVER:
        front = front_frames_per_s(out.shards, interval, front_frame_ms / 1000, policy, phased)
        front_records(out, load, front, second_chances(front, front_frame_ms / 1000, policy))
    # a frame per shard per read that finds records (a bench at a few requests a second on
    # several shards finds most reads empty; at the plan's rates every read has records)
    out.transactions_per_s = back_frames_per_s(out.records_per_s, out.shards, interval)
    if measured.edge is EdgeKind.LAMBDA:  # on phased beats: the more shards, the less it waits
        out.reply_wait_s += read_wait(interval, out.shards, phased=True) - read_wait(
            interval, int(quickest["shards"]), quickest.get("read_beats") == "phased"
        )
        out.in_flight = peak * out.reply_wait_s
        out.concurrency = peak * out.duration_s
    return out


def second_chances(fronts_per_s: float, front_frame_s: float, policy: str) -> float:
    """A busy edge process's second chances a second (functions/front.py, `_second_chance`):
    one after each front frame on the beats whose next frame is two FRONT_FRAME_MS or more
    away (shared beats; not phased beats whose reads come closer); none with fixed or auto
    frames."""
    if policy != "beats" or fronts_per_s <= 0:
        return 0.0
    return fronts_per_s if 1 / fronts_per_s >= 2 * front_frame_s - 1e-9 else 0.0


def front_records(out: Sizing, load: Traffic, fronts_per_s: float, chances_per_s: float) -> None:
    """The server edge's records a second at the peak, the hot counter's among them, when each
    of its tasks puts `fronts_per_s` front frames a second and `chances_per_s` second chances
    (each gathering for about CHANCE_S): a record per counter per frame."""
    out.fronts_per_s = fronts_per_s
    per_task = out.peak_rps / out.edge_tasks
    gathered = min(per_task * CHANCE_S, per_task / fronts_per_s / 2) if chances_per_s else 0.0
    counters, hot = distinct(
        per_task / fronts_per_s - gathered * chances_per_s / fronts_per_s, load
    )
    late, late_hot = distinct(gathered, load) if gathered else (0.0, 0.0)
    frames = out.edge_tasks * fronts_per_s
    chances = out.edge_tasks * chances_per_s
    out.records_per_s = min(out.peak_rps, counters * frames + late * chances)
    out.hot_records_per_s = min(out.peak_rps * load.hot_share, hot * frames + late_hot * chances)


@dataclass(frozen=True)
class Limit:
    name: str
    need: float
    limit: float
    change: str

    @property
    def state(self) -> str:
        if self.need > self.limit:
            return "crossed"
        return "approached" if self.need > self.limit * HEADROOM else "within"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "need": round(self.need, 1),
            "limit": self.limit,
            "state": self.state,
            "change": self.change,
        }


def limits(sizing: Sizing, commits_per_s: float, provisioned: bool = False) -> list[Limit]:
    """Every limit this deployment meets, with what to change when it is crossed;
    `provisioned`: with a provisioned reply table (else on demand)."""
    if sizing.edge is EdgeKind.ATOMIC:
        return atomic_limits(sizing)
    out = stream_limits(sizing, commits_per_s)
    out += reply_limits(sizing, provisioned)
    if sizing.edge is EdgeKind.LAMBDA:
        out += lambda_limits(sizing)
    return out


def atomic_limits(sizing: Sizing) -> list[Limit]:
    return [
        Limit(
            "DynamoDB writes to the hot counter's one item (one partition, units/s)",
            sizing.hot_records_per_s,
            DYNAMODB_PARTITION_WRITES,
            "none: one counter is one item; numerator's frames take one write per frame",
        ),
        Limit(
            "DynamoDB on-demand table at first (write units/s)",
            sizing.peak_rps,
            DYNAMODB_ON_DEMAND_START,
            "warm throughput on the table",
        ),
        *lambda_limits(sizing),
    ]


def stream_limits(sizing: Sizing, commits_per_s: float) -> list[Limit]:
    shard_records = sizing.records_per_s / sizing.shards
    return [
        Limit(
            "Kinesis writes per shard (records/s)",
            shard_records,
            SHARD_RECORDS_PER_S,
            "more shards (SHARDS / ShardCount)",
        ),
        Limit(
            "Kinesis writes per shard (bytes/s)",
            shard_records * sizing.record_bytes,
            SHARD_BYTES_PER_S,
            "more shards",
        ),
        Limit(
            "Kinesis writes of the hot counter per shard (records/s)",
            sizing.hot_records_per_s / sizing.partition_spread,
            SHARD_RECORDS_PER_S,
            "a larger PARTITION_SPREAD",
        ),
        Limit(
            "Kinesis reads per shard (GetRecords/s, every reader's)",
            SHARD_READS_PER_S,
            SHARD_READS_PER_S,
            "numerator's batcher takes all five (READ_INTERVAL_MS 200): give any other "
            "reader enhanced fan-out",
        ),
        Limit(
            "Kinesis on-demand stream at first (records/s)",
            sizing.records_per_s,
            KINESIS_ON_DEMAND_START,
            "StreamMode PROVISIONED with ShardCount, or let on-demand grow to it in steps",
        ),
        Limit(
            "Postgres commits/s (measured by the bench on this machine)",
            sizing.transactions_per_s,
            commits_per_s,
            "fewer shards per batcher frame (BACK_FRAME_MS up), or a larger instance",
        ),
    ]


def reply_limits(sizing: Sizing, provisioned: bool) -> list[Limit]:
    if provisioned:
        return [
            Limit(
                "DynamoDB provisioned reply table (units of either kind, a table's default quota)",
                max(sizing.reply_capacity.values(), default=0),
                DYNAMODB_TABLE_UNITS,
                "ask for more in Service Quotas, and give ReplyMaxUnits at least the units",
            )
        ]
    writes = sizing.reply_writes_per_s or sizing.records_per_s
    return [
        Limit(
            "DynamoDB on-demand reply table at first (write units/s)",
            writes,
            DYNAMODB_ON_DEMAND_START,
            "warm throughput on the reply table, or let it grow to it",
        ),
        Limit(
            "DynamoDB on-demand reply table (write units/s, a table's default quota)",
            writes,
            DYNAMODB_TABLE_UNITS,
            "ask for more in Service Quotas",
        ),
    ]


def lambda_limits(sizing: Sizing) -> list[Limit]:
    out = [
        Limit(
            "Lambda concurrent executions (account default)",
            sizing.concurrency,
            LAMBDA_CONCURRENCY,
            "ask for more in Service Quotas, or the server edge",
        ),
    ]
    if not sizing.url:  # a function URL has no throttle of its own: the concurrency is its limit
        out.append(
            Limit(
                "API Gateway HTTP API requests/s (account default throttle)",
                sizing.peak_rps,
                HTTP_API_RPS,
                "ask for more in Service Quotas, or the server edge",
            )
        )
    return out
