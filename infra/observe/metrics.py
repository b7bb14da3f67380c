"""A small Prometheus registry: totals (Prometheus's counters), gauges, info and histograms,
rendered in the text exposition format.

One registry per process; the edge and the batcher record into it, `/metrics` renders it. Each
kind also says how several processes' values of it add up (`add`) and how it travels as JSON
(`state`, `load`), for the sums over Lambda containers and server workers.

Why not `prometheus_client`: its multi-process mode (what several server workers need) writes
every increment under a lock to a memory-mapped file per process, and sums them by reading
every file at each scrape. `/next` increments several metrics per request, and an increment
there cost many times one here — more of a request's CPU than the switch was allowed to cost
(docs/performance.md, measurements behind the code). Nor does it sum the Lambda containers'
metrics, which travel as JSON (`state`), or take the "largest of" sum some gauges need
(`Gauge(most=True)`). So the registry is ours, every kind with its sum,
label values escaped as the format asks (`escape`). Its classes are Total and LabeledTotal
(Prometheus's counters): Counter is numerator's counter.
"""

# ruff: noqa: RUF009  # `metric` makes a field(init=False): no default is shared

from __future__ import annotations

import bisect
import os
import resource
import time
from collections.abc import Mapping, Sequence
from dataclasses import Field, dataclass, field, fields
from typing import Any

from infra.observe.health import OK

PAGE = os.sysconf("SC_PAGE_SIZE")


class Total:
    kind = "counter"

    def __init__(self, name: str, help: str) -> None:
        self.name, self.help, self.value = name, help, 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def add(self, other: Total) -> None:
        self.value += other.value

    def state(self) -> Any:
        return self.value

    def load(self, state: Any) -> None:
        self.value = float(state)

    def render(self) -> list[str]:
        return [
            f"# HELP {self.name} {self.help}",
            f"# TYPE {self.name} {self.kind}",
            f"{self.name} {_number(self.value)}",
        ]


class LabeledTotal:
    """A counter family with one label, e.g. responses by status."""

    kind = "counter"

    def __init__(self, name: str, help: str, label: str) -> None:
        self.name, self.help, self.label = name, help, label
        self.values: dict[str, float] = {}

    def inc(self, value: str, amount: float = 1.0) -> None:
        self.values[value] = self.values.get(value, 0.0) + amount

    def add(self, other: LabeledTotal) -> None:
        for value, count in other.state().items():
            self.inc(value, count)

    def state(self) -> Any:
        return dict(self.values)  # a copy at once: Lambda containers count in their threads

    def load(self, state: Any) -> None:
        self.values = {str(k): float(v) for k, v in state.items()}

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for value, count in sorted(self.values.items()):
            lines.append(f'{self.name}{{{self.label}="{escape(value)}"}} {_number(count)}')
        return lines


class Gauge(Total):
    """`most`: several processes' values combine as the largest (an age, or what each of them
    sees of the same thing), not as their sum (what each holds)."""

    kind = "gauge"

    def __init__(self, name: str, help: str, most: bool = False) -> None:
        super().__init__(name, help)
        self.most = most

    def set(self, value: float) -> None:
        self.value = value

    def add(self, other: Total) -> None:
        self.value = max(self.value, other.value) if self.most else self.value + other.value


class LabeledGauge(LabeledTotal):
    """A gauge family with one label, e.g. whether each health check passes."""

    kind = "gauge"

    def set(self, value: str, amount: float) -> None:
        self.values[value] = amount

    def add(self, other: LabeledTotal) -> None:
        for value, amount in other.state().items():
            self.values[value] = max(self.values.get(value, amount), amount)


class Info:
    """A constant 1 with labels that describe the process (version, settings)."""

    kind = "gauge"

    def __init__(self, name: str, help: str) -> None:
        self.name, self.help = name, help
        self.labels: dict[str, str] = {}

    def add(self, other: Info) -> None:
        self.labels = self.labels or dict(other.labels)  # the first's

    def state(self) -> Any:
        return dict(self.labels)

    def load(self, state: Any) -> None:
        self.labels = dict(state)

    def render(self) -> list[str]:
        if not self.labels:
            return []
        pairs = ",".join(f'{k}="{escape(v)}"' for k, v in sorted(self.labels.items()))
        return [
            f"# HELP {self.name} {self.help}",
            f"# TYPE {self.name} {self.kind}",
            f"{self.name}{{{pairs}}} 1",
        ]


class Histogram:
    kind = "histogram"

    def __init__(self, name: str, help: str, buckets: Sequence[float]) -> None:
        self.name, self.help = name, help
        self.bounds = list(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        """Count `value` (`times` over: a frame's hop, once for each request in it)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times
        self.count += times

    def add(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.sum += other.sum
        self.count += other.count

    def state(self) -> Any:
        return {"counts": list(self.counts), "sum": self.sum, "count": self.count}

    def load(self, state: Any) -> None:
        if len(state["counts"]) == len(self.counts):  # another version's buckets: left out
            self.counts = [int(c) for c in state["counts"]]
            self.sum, self.count = float(state["sum"]), int(state["count"])

    def render(self) -> list[str]:
        head = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        return head + self.samples()

    def samples(self, pair: str = "") -> list[str]:
        """The buckets, sum and count, each with the label `pair` (`hop="put"`) if any."""
        both, alone = (f"{pair},", f"{{{pair}}}") if pair else ("", "")
        lines, running = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            lines.append(f'{self.name}_bucket{{{both}le="{_number(bound)}"}} {running}')
        lines.append(f'{self.name}_bucket{{{both}le="+Inf"}} {self.count}')
        lines.append(f"{self.name}_sum{alone} {_number(self.sum)}")
        lines.append(f"{self.name}_count{alone} {self.count}")
        return lines


class LabeledHistogram:
    """A histogram family with one label, e.g. the time each hop of a request took. `observe`
    may count a value several times (`times`): a frame's hop, once for each request in it."""

    kind = "histogram"

    def __init__(self, name: str, help: str, label: str, buckets: Sequence[float]) -> None:
        self.name, self.help, self.label = name, help, label
        self.bounds = list(buckets)
        self.values: dict[str, Histogram] = {}

    def observe(self, value: str, seconds: float, times: int = 1) -> None:
        one = self.values.get(value)
        if one is None:
            one = self.values[value] = Histogram(self.name, self.help, self.bounds)
        one.observe(seconds, times)

    def add(self, other: LabeledHistogram) -> None:
        for value, state in other.state().items():
            one = Histogram(self.name, self.help, self.bounds)
            one.load(state)
            mine = self.values.get(value)
            if mine is not None:
                one.add(mine)
            self.values[value] = one

    def state(self) -> Any:
        return {value: one.state() for value, one in list(self.values.items())}

    def load(self, state: Any) -> None:
        self.values = {}
        for value, each in state.items():
            one = self.values[str(value)] = Histogram(self.name, self.help, self.bounds)
            one.load(each)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for value, one in sorted(self.values.items()):
            lines += one.samples(f'{self.label}="{escape(value)}"')
        return lines


def resident_bytes() -> int:
    """This process's resident memory (Linux: /proc; elsewhere its peak, from getrusage)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * PAGE
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def escape(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote and line feed
    escaped, so that a value (a setting, an error's name) cannot end its label or its line."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


SIZES = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

Kind = Total | LabeledTotal | Info | Histogram | LabeledHistogram
KINDS: dict[str, type[Kind]] = {
    kind.__name__: kind
    for kind in (Total, LabeledTotal, Gauge, LabeledGauge, Info, Histogram, LabeledHistogram)
}


def metric(help: str, prefix: str = "numerator_", **options: Any) -> Any:
    """One metric of `Metrics`, declared as a field: its kind is the field's type, its name the
    field's (`numerator_` before it, `_total` after a counter's)."""
    return field(init=False, metadata={"help": help, "prefix": prefix, "options": options})


@dataclass(slots=True, eq=False, repr=False)
class Metrics:
    """Every signal numerator exposes, declared below in the order `/metrics` shows them. Names
    follow Prometheus conventions; one word per idea."""

    info: Info = metric("Version and settings of this process.")
    next_requests: Total = metric("Requests to POST /counters/{name}/next.")
    responses: LabeledTotal = metric("HTTP responses to /next by status code.", label="status")
    values_allocated: Total = metric("Values handed out by committed frames.")
    frames_committed: Total = metric("Postgres transactions that allocated values (one per frame).")
    frame_retries: Total = metric("Frames retried after a retryable Postgres error.")
    records_in: Total = metric("Records the batcher read from the stream.")
    records_out: Total = metric("Replies the batcher published.")
    dead_letters: Total = metric("Records kept in the dead-letter table.")
    records_expired: Total = metric(
        "Records read after their client stopped waiting; answered without allocating."
    )
    replies_abandoned: Total = metric(
        "Replies with values nobody read (client timed out or gone); their values are void, "
        "abandoned. An error reply nobody read is not counted: it held no values.",
    )
    replies_pushed: Total = metric(
        "Replies a server edge took from a batcher's push before reading the reply table "
        "(infra/adapters/push.py): the rest it read from the table.",
    )
    pushes_dropped: Total = metric(
        "Datagrams a server edge's inbox dropped: not signed with its token (forged, garbled, or "
        "meant for a process that had the port before).",
    )
    pushes_sent: Total = metric(
        "Datagrams of replies a batcher pushed to the edges that wait for them, after commit.",
    )
    clients_gone: Total = metric(
        "/next requests whose client went away before the answer: their records cancelled.",
    )
    records_cancelled: Total = metric(
        "Records whose edge gave up before they were applied: nothing allocated."
    )
    values_abandoned: Total = metric(
        "Values voided as abandoned: their edge gave up after the record was applied."
    )
    records_rewound: Total = metric(
        "Records refused because their counter is below values already handed out (a rewind: "
        "Postgres forgot commits); refused until `numerator counters mend` (docs/runbook.md).",
    )
    replies_republished: Total = metric(
        "Replies published again by a shard's next owner after a crash before publishing."
    )
    records_replayed: Total = metric(
        "Records read again after they were applied (a rewound checkpoint): answered from "
        "their kept replies, never allocated twice.",
    )
    records_put: Total = metric(
        "Records put on the stream: an edge's, divided by /next requests, what front frames "
        "save (one record per counter per front frame); a batcher's, the cancels of records "
        "it gave up in an outage.",
    )
    front_frame_requests: Histogram = metric(
        "Requests one front frame answered with one counter's record.", buckets=SIZES
    )
    anchors_refused: Total = metric(
        "Times a batcher did not anchor the audit chains' heads because the trail no longer "
        "holds the heads anchored before (a rewrite: see /healthz's alerts and the log).",
    )
    batchers: Gauge = metric(
        "Live batchers sharing the stream's shards, as this one sees.", most=True
    )
    leases_held: Gauge = metric("Shard leases this batcher holds.")
    shard_restarts: Total = metric(
        "Shard loops that died of an unexpected error and were started again (a bug: see "
        "the log's traceback).",
    )
    lease_takeovers: Total = metric(
        "Shard leases taken from another batcher: expired (a dead batcher's) or given up "
        "to balance the shards.",
    )
    shards_avoided: Total = metric(
        "Times an edge stopped putting on a shard for AVOID_S (phased beats): a record's reply "
        "there was overdue, its batcher frozen or gone with its lease held.",
    )
    aws_throttles: LabeledTotal = metric(
        "AWS calls answered with throttling (retried), by API call.", label="call"
    )
    aws_calls: LabeledTotal = metric("Calls to Kinesis and DynamoDB, by API call.", label="call")
    aws_call_seconds: LabeledTotal = metric(
        "Seconds the calls to Kinesis and DynamoDB took, each try from when it was handed to "
        "the AWS threads to its answer, by API call: over numerator_aws_calls_total, a call's "
        "mean latency as the process waits for it.",
        label="call",
    )
    aws_cpu_seconds: Total = metric(
        "CPU seconds the AWS threads spent in the calls to Kinesis and DynamoDB (botocore "
        "builds, signs, sends and parses each), each call that answered."
    )
    invocation_cpu_seconds: Histogram = metric(
        "The Lambda edge run here (`numerator up --edge lambda`): CPU seconds of each "
        "invocation after its container's first, its thread's and its AWS calls': what a "
        "Lambda is billed for beyond its waits (numerator plan).",
        buckets=SECONDS,
    )
    reply_items: LabeledTotal = metric(
        "Reply table items read and written, by op (DynamoDB bills by the item): a frame's "
        "replies to one long-running edge are one item.",
        label="op",
    )
    reply_units: LabeledTotal = metric(
        "DynamoDB capacity units of the reply table's reads and writes, by op, as DynamoDB "
        "bills them: a write unit per KB of an item, a strongly consistent read unit per "
        "4 KB a Query reads (one at least) or per key a BatchGetItem asks for.",
        label="op",
    )
    aws_retries: LabeledTotal = metric(
        "AWS calls tried again, by reason (throttled, transient, connection).",
        label="reason",
    )
    requests_refused: LabeledTotal = metric(
        "Requests refused before any work: a header repeated (400), no or a bad key (401), a "
        "key without the scope (403), too many Idempotency-Keys (429), headers too large "
        "(431), by status.",
        label="status",
    )
    keys_refresh_errors: Total = metric(
        "Failed reloads of the API keys from Postgres (the edge keeps its last copy)."
    )
    frame_size_records: Histogram = metric("Records per frame.", buckets=SIZES)
    frame_commit_seconds: Histogram = metric(
        "Time to commit one frame's transaction.", buckets=SECONDS
    )
    reply_wait_seconds: Histogram = metric("Time a request waited for its reply.", buckets=SECONDS)
    reply_lag_seconds: Gauge = metric(
        "How long after a read beat this edge first reads the replies of the records read on "
        "it: learned from when the replies were written (REPLY_LAG_MS and BACK_FRAME_MS until "
        "then); the largest of the processes'.",
        most=True,
    )
    reply_found_seconds: Histogram = metric(
        "Time from when a reply could be read (the written time on its item) to when its edge "
        "read it: what reading on the beats adds to a request.",
        buckets=SECONDS,
    )
    hop_seconds: LabeledHistogram = metric(
        "On the AWS path (and an edge's hops on two tiers' workers), what each hop of a /next "
        "adds to it, by hop, once a request (an edge's) or a record (a batcher's): an edge's "
        "`front` (waiting in its front frame), "
        "`put` (the stream's put) and `reply` (from the put's return to the reply in hand); a "
        "batcher's `stream` (from the stream's arrival stamp to the read's return: the wait "
        "for the shard's beat and the GetRecords), `frame` (from the read to its frame's "
        "commit), `commit` and `publish` (from the commit to the reply pushed, or written).",
        label="hop",
        buckets=SECONDS,
    )
    batcher_lag_seconds: Gauge = metric("Age of the oldest record in the last frame.", most=True)
    stream_depth_records: Gauge = metric("Records waiting on the in-process stream.")
    check_up: LabeledGauge = metric(
        "1 when what this process needs answers (its /healthz checks: store, stream, "
        "replies, batchers), 0 when not; as of the scrape.",
        label="check",
    )
    process_cpu_seconds: Total = metric(
        "CPU time this role's processes used (user and system).", prefix=""
    )
    process_resident_memory_bytes: Gauge = metric(
        "Resident memory of this role's processes.", prefix=""
    )

    def __post_init__(self) -> None:
        for declared in fields(self):
            kind, about = KINDS[str(declared.type)], declared.metadata
            setattr(
                self, declared.name, kind(NAMES[declared.name], about["help"], **about["options"])
            )

    def sample(self) -> None:
        """Read this process's CPU time and resident memory."""
        self.process_cpu_seconds.value = time.process_time()
        self.process_resident_memory_bytes.set(resident_bytes())

    def health(self, report: Mapping[str, str]) -> Metrics:
        """Set numerator_check_up from a health report (observe.health: "ok" or what is wrong)."""
        for name, answer in report.items():
            self.check_up.set(name, 1.0 if answer == OK else 0.0)
        return self

    def items(self) -> list[tuple[str, Kind]]:
        """Each metric's name with this process's value of it, in the declared order."""
        return [(NAMES[declared.name], getattr(self, declared.name)) for declared in fields(self)]

    def render(self) -> str:
        lines: list[str] = []
        for _, item in self.items():
            lines.extend(item.render())
        return "\n".join(lines) + "\n"

    @classmethod
    def total(cls, many: list[Metrics]) -> Metrics:
        """Several processes' (or simulated Lambda containers') metrics as one: counters and
        histograms add up, gauges too (leases held, depth) or the largest is taken (lag), the
        info is the first's."""
        out = cls()
        into = dict(out.items())
        for metrics in many:
            for name, item in metrics.items():
                into[name].add(item)  # type: ignore[arg-type]  # the same kind: the same name
        return out

    def state(self) -> dict[str, Any]:
        """Every value by its metric's name, as JSON can hold it: `from_state` makes the
        Metrics again."""
        return {name: item.state() for name, item in self.items()}

    @classmethod
    def from_state(cls, state: dict[str, Any], gauges: bool = True) -> Metrics:
        """Without `gauges`, a gone process's metrics: what it counted stays, what it held
        (leases, depth) does not. Names this version does not know are left out."""
        out = cls()
        for name, item in out.items():
            value = state.get(name)
            if value is not None and (gauges or not isinstance(item, Gauge | LabeledGauge)):
                item.load(value)
        return out


def _name(declared: Field[Any]) -> str:
    counter = KINDS[str(declared.type)].kind == "counter"
    return f"{declared.metadata['prefix']}{declared.name}{'_total' if counter else ''}"


NAMES = {declared.name: _name(declared) for declared in fields(Metrics)}
"""Each attribute's metric name: the attribute's own, with `numerator_` and `_total` as due."""
