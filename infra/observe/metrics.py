"""A small Prometheus registry: totals (Prometheus's counters), gauges, info and histograms,
rendered in the text exposition format.

One registry per process; the edge and the batcher record into it, `/metrics` renders it. Each
kind also says how several processes' values of it add up (`add`) and how it travels as JSON
(`state`, `load`), for the sums over Lambda containers and server workers.

Why not `prometheus_client`: its multi-process mode (what several server workers need) writes
every increment under a lock to a memory-mapped file per process, and sums them by reading
every file at each scrape. Measured on the team's 2-core machine, a million increments each:
1.9 µs per increment there (0.26.0, PROMETHEUS_MULTIPROC_DIR set), 0.18 µs here. `/next`
increments several metrics per request, so the difference is several per cent of a request's
CPU at the rates numerator is for, past the 2 % the switch was allowed to cost. Nor does it
sum the Lambda containers' metrics, which travel as JSON (`state`), or take the "largest of"
sum some gauges need (`Gauge(most=True)`). So the registry is ours, every kind with its sum,
label values escaped as the format asks (`escape`). Its classes are Total and LabeledTotal
(Prometheus's counters): Counter is numerator's counter.
"""

from __future__ import annotations

import bisect
import os
import resource
import time
from collections.abc import Mapping, Sequence
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
            f"# TYPE {self.name} gauge",
            f"{self.name}{{{pairs}}} 1",
        ]


class Histogram:
    def __init__(self, name: str, help: str, buckets: Sequence[float]) -> None:
        self.name, self.help = name, help
        self.bounds = list(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

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
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            lines.append(f'{self.name}_bucket{{le="{_number(bound)}"}} {running}')
        lines.append(f'{self.name}_bucket{{le="+Inf"}} {self.count}')
        lines.append(f"{self.name}_sum {_number(self.sum)}")
        lines.append(f"{self.name}_count {self.count}")
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


class Metrics:
    """Every signal numerator exposes. Names follow Prometheus conventions; one word per idea."""

    def __init__(self) -> None:
        self.info = Info("numerator_info", "Version and settings of this process.")
        self.next_requests = Total(
            "numerator_next_requests_total", "Requests to POST /counters/{name}/next."
        )
        self.responses = LabeledTotal(
            "numerator_responses_total", "HTTP responses to /next by status code.", "status"
        )
        self.values_allocated = Total(
            "numerator_values_allocated_total", "Values handed out by committed frames."
        )
        self.frames_committed = Total(
            "numerator_frames_committed_total",
            "Postgres transactions that allocated values (one per frame).",
        )
        self.frame_retries = Total(
            "numerator_frame_retries_total", "Frames retried after a retryable Postgres error."
        )
        self.records_in = Total(
            "numerator_records_in_total", "Records the batcher read from the stream."
        )
        self.records_out = Total("numerator_records_out_total", "Replies the batcher published.")
        self.dead_letters = Total(
            "numerator_dead_letters_total", "Records kept in the dead-letter table."
        )
        self.expired = Total(
            "numerator_records_expired_total",
            "Records read after their client stopped waiting; answered without allocating.",
        )
        self.abandoned = Total(
            "numerator_replies_abandoned_total",
            "Replies nobody read (client timed out or gone); their values are void, abandoned.",
        )
        self.gone = Total(
            "numerator_clients_gone_total",
            "/next requests whose client went away before the answer: their records cancelled.",
        )
        self.cancelled = Total(
            "numerator_records_cancelled_total",
            "Records whose edge gave up before they were applied: nothing allocated.",
        )
        self.voided = Total(
            "numerator_values_abandoned_total",
            "Values voided as abandoned: their edge gave up after the record was applied.",
        )
        self.republished = Total(
            "numerator_replies_republished_total",
            "Replies published again by a shard's next owner after a crash before publishing.",
        )
        self.replays = Total(
            "numerator_records_replayed_total",
            "Records read again after they were applied (a rewound checkpoint): answered from "
            "their kept replies, never allocated twice.",
        )
        self.records_put = Total(
            "numerator_records_put_total",
            "Records the edge put on the stream: divided by /next requests, what front frames "
            "save (one record per counter per front frame).",
        )
        self.front_frame_size = Histogram(
            "numerator_front_frame_requests",
            "Requests one front frame answered with one counter's record.",
            SIZES,
        )
        self.batchers = Gauge(
            "numerator_batchers",
            "Live batchers sharing the stream's shards, as this one sees.",
            most=True,
        )
        self.leases = Gauge("numerator_leases_held", "Shard leases this batcher holds.")
        self.restarts = Total(
            "numerator_shard_restarts_total",
            "Shard loops that died of an unexpected error and were started again (a bug: see "
            "the log's traceback).",
        )
        self.takeovers = Total(
            "numerator_lease_takeovers_total",
            "Shard leases taken from another batcher: expired (a dead batcher's) or given up "
            "to balance the shards.",
        )
        self.aws_throttles = LabeledTotal(
            "numerator_aws_throttles_total",
            "AWS calls answered with throttling (retried), by API call.",
            "call",
        )
        self.aws_calls = LabeledTotal(
            "numerator_aws_calls_total", "Calls to Kinesis and DynamoDB, by API call.", "call"
        )
        self.reply_items = LabeledTotal(
            "numerator_reply_items_total",
            "Reply table items read and written, by op (DynamoDB bills by the item): a frame's "
            "replies to one long-running edge are one item.",
            "op",
        )
        self.reply_units = LabeledTotal(
            "numerator_reply_units_total",
            "DynamoDB capacity units of the reply table's reads and writes, by op, as DynamoDB "
            "bills them: a write unit per KB of an item, a strongly consistent read unit per "
            "4 KB a Query reads (one at least) or per key a BatchGetItem asks for.",
            "op",
        )
        self.aws_retries = LabeledTotal(
            "numerator_aws_retries_total",
            "AWS calls tried again, by reason (throttled, transient, connection).",
            "reason",
        )
        self.refused = LabeledTotal(
            "numerator_requests_refused_total",
            "Requests refused before any work: no or a bad key (401), a key without the scope "
            "(403), too many Idempotency-Keys (429), headers too large (431), by status.",
            "status",
        )
        self.keys_refresh_errors = Total(
            "numerator_keys_refresh_errors_total",
            "Failed reloads of the API keys from Postgres (the edge keeps its last copy).",
        )
        self.frame_size = Histogram("numerator_frame_size_records", "Records per frame.", SIZES)
        self.frame_seconds = Histogram(
            "numerator_frame_commit_seconds", "Time to commit one frame's transaction.", SECONDS
        )
        self.reply_wait = Histogram(
            "numerator_reply_wait_seconds", "Time a request waited for its reply.", SECONDS
        )
        self.lag = Gauge(
            "numerator_batcher_lag_seconds",
            "Age of the oldest record in the last frame.",
            most=True,
        )
        self.stream_depth = Gauge(
            "numerator_stream_depth_records", "Records waiting on the in-process stream."
        )
        self.checks = LabeledGauge(
            "numerator_check_up",
            "1 when what this process needs answers (its /healthz checks: store, stream, "
            "replies, batchers), 0 when not; as of the scrape.",
            "check",
        )
        self.cpu = Total(
            "process_cpu_seconds_total", "CPU time this role's processes used (user and system)."
        )
        self.memory = Gauge(
            "process_resident_memory_bytes", "Resident memory of this role's processes."
        )

    def sample(self) -> None:
        """Read this process's CPU time and resident memory."""
        self.cpu.value = time.process_time()
        self.memory.set(resident_bytes())

    def health(self, report: Mapping[str, str]) -> Metrics:
        """Set numerator_check_up from a health report (observe.health: "ok" or what is wrong)."""
        for name, answer in report.items():
            self.checks.set(name, 1.0 if answer == OK else 0.0)
        return self

    def render(self) -> str:
        lines: list[str] = []
        for item in vars(self).values():
            lines.extend(item.render())
        return "\n".join(lines) + "\n"

    @classmethod
    def total(cls, many: list[Metrics]) -> Metrics:
        """Several processes' (or simulated Lambda containers') metrics as one: counters and
        histograms add up, gauges too (leases held, depth) or the largest is taken (lag), the
        info is the first's."""
        out = cls()
        for metrics in many:
            for name, item in vars(metrics).items():
                getattr(out, name).add(item)
        return out

    def state(self) -> dict[str, Any]:
        """Every value, as JSON can hold it: `from_state` makes the Metrics again."""
        return {name: item.state() for name, item in vars(self).items()}

    @classmethod
    def from_state(cls, state: dict[str, Any], gauges: bool = True) -> Metrics:
        """Without `gauges`, a gone process's metrics: what it counted stays, what it held
        (leases, depth) does not. Names this version does not know are left out."""
        out = cls()
        for name, value in state.items():
            item = getattr(out, name, None)
            if item is not None and (gauges or not isinstance(item, Gauge | LabeledGauge)):
                item.load(value)
        return out
