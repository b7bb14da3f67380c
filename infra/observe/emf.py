"""numerator's metrics where AWS users look for them: CloudWatch Embedded Metric Format lines on
stdout, written with Powertools for AWS Lambda. CloudWatch Logs turns each line into metrics in
the namespace `numerator` with the dimensions `service` and `role` (lambda, server, batcher) —
what the alarms of template.yaml watch. Each process writes one line an interval, not one a
request (the Lambda edge's 279-byte line an invocation was, at 10,000 rps, about $3,900 a month
of CloudWatch Logs, over three times the server edge's whole bill): on ECS the batcher and the
server edge (Edge=fargate) every EMF_INTERVAL_S, beside their /metrics; a Lambda container at
the end of the invocation that finds the interval passed, or that counted a server error or a
throttle (an alarm's figures are not held back for a minute).

Each line carries what changed since the previous one, so that CloudWatch's sums are right."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from infra.observe.metrics import Metrics

NAMESPACE = "numerator"
COUNTS = {  # Metrics attribute: the CloudWatch metric
    "next_requests": "Requests",
    "records_put": "RecordsPut",
    "values_allocated": "ValuesAllocated",
    "frames_committed": "FramesCommitted",
    "frame_retries": "FrameRetries",
    "records_in": "RecordsIn",
    "dead_letters": "DeadLetters",
    "records_expired": "RecordsExpired",
    "replies_abandoned": "RepliesAbandoned",
    "replies_republished": "RepliesRepublished",
    "lease_takeovers": "LeaseTakeovers",
}
STATUSES = {"503": "Unavailable", "504": "ReplyTimeouts"}


class Emf:
    """Writes the changes in `metrics` as one EMF line per `flush`; `tick` flushes once `every`
    seconds have passed since the last line (0: at every tick)."""

    def __init__(self, metrics: Metrics, role: str, every: float = 0.0) -> None:
        from aws_lambda_powertools import Metrics as Out
        from aws_lambda_powertools.metrics import MetricUnit

        self.metrics, self.role = metrics, role
        self.out: Any = Out(namespace=NAMESPACE, service=NAMESPACE)
        if self.out.default_dimensions.get("role", role) != role:
            # Powertools keeps one set of dimensions per process, shared by every instance: a
            # process of another role before this one (in the tests) would leave its own.
            self.out.clear_default_dimensions()
            self.out.clear_metrics()
        self.out.set_default_dimensions(role=role)
        self.last: dict[str, float] = {}
        self.every, self.flushed_at = every, time.monotonic()
        self.units = {"LagSeconds": MetricUnit.Seconds}
        self.count = MetricUnit.Count

    def totals(self) -> dict[str, float]:
        metrics = self.metrics
        out = {name: getattr(metrics, attr).value for attr, name in COUNTS.items()}
        statuses = metrics.responses.values
        for status, name in STATUSES.items():
            out[name] = statuses.get(status, 0.0)
        out["ServerErrors"] = sum(v for k, v in statuses.items() if k.startswith("5"))
        out["AwsThrottles"] = sum(metrics.aws_throttles.values.values())
        return out

    def tick(self, now: float | None = None) -> dict[str, float]:
        """Flush if the interval has passed, or a server error or a throttle was counted since
        the last line; what was written."""
        now = time.monotonic() if now is None else now
        if now - self.flushed_at < self.every and not self.alarming():
            return {}
        self.flushed_at = now
        return self.flush()

    def alarming(self) -> bool:
        """Server errors or throttles counted since the last line."""
        metrics, last = self.metrics, self.last
        errors = sum(v for k, v in metrics.responses.values.items() if k.startswith("5"))
        throttles = sum(metrics.aws_throttles.values.values())
        return errors != last.get("ServerErrors", 0.0) or throttles != last.get("AwsThrottles", 0.0)

    def flush(self) -> dict[str, float]:
        """Write what changed since the last flush (nothing when nothing did); what was written."""
        now = self.totals()
        changed = {k: v - self.last.get(k, 0.0) for k, v in now.items()}
        changed = {k: v for k, v in changed.items() if v}
        if self.role == "batcher":  # a gauge: said when it moved, or beside what did
            lag = self.metrics.batcher_lag_seconds.value
            if changed or lag != self.last.get("LagSeconds"):
                changed["LagSeconds"] = lag
            now["LagSeconds"] = lag
        self.last = now
        if not changed:
            return {}
        for name, value in changed.items():
            self.out.add_metric(name=name, unit=self.units.get(name, self.count), value=value)
        self.out.flush_metrics()
        return changed


@asynccontextmanager
async def writing(metrics: Metrics, role: str, every: float) -> AsyncIterator[Emf]:
    """EMF lines of `metrics` every `every` seconds while the block runs, and once more as it
    ends: a long-running process's (the batcher's, the server edge's on ECS: the awslogs driver
    takes stdout to CloudWatch Logs). Each worker of a server writes its own changes, so
    CloudWatch's sums add them up."""
    emf = Emf(metrics, role)

    async def loop() -> None:
        while True:
            await asyncio.sleep(every)
            emf.flush()

    task = asyncio.create_task(loop())
    try:
        yield emf
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        emf.flush()
