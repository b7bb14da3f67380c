"""The service side of a run: /metrics scraped every second into per-second deltas, and the CPU
and memory of the service's processes."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import psutil

from bench import hops
from bench.scrape import parse

# Counters the report shows per second, under plain names.
RATES = {
    "records_in": "numerator_records_in_total",
    "records_out": "numerator_records_out_total",
    "requests": "numerator_next_requests_total",
    "values": "numerator_values_allocated_total",
    "transactions": "numerator_frames_committed_total",
    "commit_s": "numerator_frame_commit_seconds_sum",  # bench/headroom.py: the store's busy share
    "dead_letters": "numerator_dead_letters_total",
    "frame_retries": "numerator_frame_retries_total",
    "records_put": "numerator_records_put_total",
    "replies_pushed": "numerator_replies_pushed_total",
    "republished": "numerator_replies_republished_total",
    "takeovers": "numerator_lease_takeovers_total",
    "reply_items_read": 'numerator_reply_items_total{op="read"}',
    "reply_items_written": 'numerator_reply_items_total{op="written"}',
    "reply_units_read": 'numerator_reply_units_total{op="read"}',
    "reply_units_written": 'numerator_reply_units_total{op="write"}',
    "invocation_cpu_s": "numerator_invocation_cpu_seconds_sum",  # a Lambda's warm invocations
    "invocations_timed": "numerator_invocation_cpu_seconds_count",
    "reply_wait_s": "numerator_reply_wait_seconds_sum",  # the edge's waits for replies
    "replies_waited": "numerator_reply_wait_seconds_count",
}
BASELINE_TRANSACTIONS = "baseline_transactions_total"
BASELINE_REQUESTS = "baseline_requests_total"
FRAME_SUM, FRAME_COUNT = "numerator_frame_size_records_sum", "numerator_frame_size_records_count"
LAG = "numerator_batcher_lag_seconds"
LEASES = "numerator_leases_held"  # a gauge: summed over the batchers, the shards held
AWS = "numerator_aws_calls_total"
AWS_SECONDS = "numerator_aws_call_seconds_total"
THROTTLES = "numerator_aws_throttles_total"


def totals(metrics: dict[str, float]) -> dict[str, float]:
    """The plain-named totals of one scrape (baselines count one transaction per request)."""
    out = {name: metrics.get(metric, 0.0) for name, metric in RATES.items()}
    if BASELINE_TRANSACTIONS in metrics:
        out["transactions"] = metrics[BASELINE_TRANSACTIONS]
        out["requests"] = metrics.get(BASELINE_REQUESTS, 0.0)
    out["frame_sum"] = metrics.get(FRAME_SUM, 0.0)
    out["frame_count"] = metrics.get(FRAME_COUNT, 0.0)
    out["throttles"] = 0.0
    out.update(hops.scraped(metrics))
    for name, value in metrics.items():
        if name.startswith(AWS + "{"):  # numerator_aws_calls_total{call="put_records"}
            out["aws:" + name[len(AWS) + 1 : -1].removeprefix('call="').removesuffix('"')] = value
        elif name.startswith(AWS_SECONDS + "{"):
            call = name[len(AWS_SECONDS) + 1 : -1].removeprefix('call="').removesuffix('"')
            out["aws_s:" + call] = value
        elif name.startswith(THROTTLES + "{"):
            out["throttles"] += value
    return out


def aws_calls(totals: dict[str, Any]) -> dict[str, float]:
    """The AWS calls a run made, by API call (the calls that were made at all)."""
    return {k[4:]: v for k, v in totals.items() if k.startswith("aws:") and v}


def combined(scrapes: list[dict[str, float]]) -> dict[str, float]:
    """Several processes' totals as one service's (the edge and its batchers): counters add up,
    the lag is the worst."""
    out: dict[str, float] = {}
    for scrape in scrapes:
        for name, value in scrape.items():
            out[name] = (
                max(out.get(name, 0.0), value) if name == "lag" else out.get(name, 0.0) + value
            )
    return out


def info(text: str) -> dict[str, str]:
    """The labels of numerator_info: the service's version and settings, as it reports them."""
    for line in text.splitlines():
        if line.startswith("numerator_info{"):
            body = line[len("numerator_info{") : line.rindex("}")]
            return dict(re.findall(r'(\w+)="([^"]*)"', body))
    return {}


@dataclass
class Processes:
    """The service's processes (and their children) by pid, sampled for CPU and memory.

    Sampling runs in the load generator's event loop, so it must be cheap: the family is looked
    up (a scan of every process on the machine) only every `refresh` seconds, not at every
    sample — a stall that long each second showed up as the generator's own missed sends and as
    a p99 the service never had (docs/performance.md, measurements behind the code)."""

    pids: list[int]
    refresh: float = 10.0
    known: dict[int, psutil.Process] = field(default_factory=dict)
    found_at: float = -float("inf")
    tier_of: dict[int, str] = field(default_factory=dict)
    tiers: dict[str, float] = field(default_factory=dict)
    """CPU percent per tier at the last sample: edge, stream (moto), batcher, postgres."""

    def _family(self) -> None:
        family: dict[int, psutil.Process] = {}
        for pid in self.pids:
            try:
                root = self.known.get(pid) or psutil.Process(pid)
                for process in (root, *root.children(recursive=True)):
                    family[process.pid] = self.known.get(process.pid, process)
                    if process.pid not in self.tier_of:
                        self.tier_of[process.pid] = tier(process)
            except psutil.Error:
                continue
        self.known, self.found_at = family, time.monotonic()

    def sample(self) -> tuple[float, float]:
        """CPU percent (100 = one core) since the last sample, and RSS in MB, summed."""
        if time.monotonic() - self.found_at >= self.refresh:
            self._family()
        cpu = rss = 0.0
        tiers: dict[str, float] = {}
        for pid, process in list(self.known.items()):
            try:
                with process.oneshot():
                    used = process.cpu_percent(None)
                    rss += process.memory_info().rss / 2**20
            except psutil.Error:
                del self.known[pid]
                continue
            cpu += used
            name = self.tier_of.get(pid, "edge")
            tiers[name] = tiers.get(name, 0.0) + used
        self.tiers = tiers
        return cpu, rss


def tier(process: psutil.Process) -> str:
    """Which part of the service a process is, from its command line."""
    try:
        line = " ".join(process.cmdline())
    except psutil.Error:
        return "edge"
    if "moto.server" in line or "numerator.motoserver" in line:
        return "stream"
    if "numerator batcher" in line:
        return "batcher"
    if "postgres" in process.name() or "/bin/postgres" in line:
        return "postgres"
    return "edge"


@dataclass
class Collector:
    url: str
    processes: Processes | None = None
    others: list[str] = field(default_factory=list)
    """More /metrics of the same service (the AWS path's batchers), added to the edge's."""
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every scrape (an API key with the read scope)."""
    interval: float = 1.0
    samples: list[dict[str, Any]] = field(default_factory=list)
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    failures: int = 0
    info: dict[str, str] = field(default_factory=dict)

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(timeout=5, headers=self.headers) as client:
            previous = await self._scrape(client)
            self.first = dict(previous or {})
            if self.processes:
                self.processes.sample()
            then = time.monotonic()
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval)
                current = await self._scrape(client)
                now = time.monotonic()
                if current is None or previous is None:
                    previous, then = current or previous, now
                    continue
                self.samples.append(self._delta(now, now - then, previous, current))
                previous, then = current, now
            if previous is not None:
                self.last = previous

    async def _scrape(self, client: httpx.AsyncClient) -> dict[str, float] | None:
        scrapes = []
        for url in [self.url, *self.others]:
            try:
                response = await client.get(url + "/metrics")
                response.raise_for_status()
            except httpx.HTTPError:
                self.failures += 1
                return None
            scraped = parse(response.text)
            if url == self.url:
                self.info = info(response.text) or self.info
            out = totals(scraped)
            out["lag"] = scraped.get(LAG, 0.0)
            out["leases"] = scraped.get(LEASES, 0.0)
            scrapes.append(out)
        return combined(scrapes)

    def _delta(
        self, at: float, span: float, before: dict[str, float], after: dict[str, float]
    ) -> dict[str, Any]:
        """One sample: counters as rates per second over `span`, ending at monotonic time `at`
        (the caller turns it into seconds since the load began)."""
        sample: dict[str, Any] = {"t": at, "span_s": round(span, 3)}
        for name in after:
            if name == "lag":
                sample["lag_s"] = after["lag"]
            elif name == "leases":
                sample["leases"] = after["leases"]
            elif name not in ("frame_sum", "frame_count") and not name.startswith("hop:"):
                sample[name] = (after[name] - before.get(name, 0.0)) / max(span, 1e-9)
        frames = after["frame_count"] - before["frame_count"]
        sample["frame_size_mean"] = (
            (after["frame_sum"] - before["frame_sum"]) / frames if frames else 0.0
        )
        if self.processes:
            sample["cpu_pct"], sample["rss_mb"] = self.processes.sample()
            for name, used in self.processes.tiers.items():
                sample[f"cpu_pct:{name}"] = used
        return sample

    def summary(self) -> dict[str, Any]:
        """Totals over the run (last scrape minus first) and CPU/memory peaks and means."""
        out: dict[str, Any] = {}
        if self.first and self.last:
            for name in self.last:
                if name not in ("lag", "leases", "frame_sum", "frame_count"):
                    out[name] = self.last[name] - self.first.get(name, 0.0)
            frames = self.last["frame_count"] - self.first.get("frame_count", 0.0)
            out["frame_size_mean"] = (
                (self.last["frame_sum"] - self.first.get("frame_sum", 0.0)) / frames
                if frames
                else 0.0
            )
            out["hops"] = hops.summary({k: v for k, v in out.items() if k.startswith("hop:")})
            out = {k: v for k, v in out.items() if not k.startswith("hop:")}
        busy = [s for s in self.samples if s.get("requests", 0) > 0] or self.samples
        cpu = [s["cpu_pct"] for s in busy if "cpu_pct" in s]
        rss = [s["rss_mb"] for s in self.samples if "rss_mb" in s]
        out["cpu_pct"] = sum(cpu) / len(cpu) if cpu else None
        tiers = sorted({k for s in busy for k in s if k.startswith("cpu_pct:")})
        if len(tiers) > 1:
            out["cpu_pct_by_tier"] = {
                k.split(":", 1)[1]: round(sum(s.get(k, 0.0) for s in busy) / len(busy), 1)
                for k in tiers
            }
        out["rss_mb"] = max(rss) if rss else None
        out["lag_max_s"] = max((s.get("lag_s", 0.0) for s in self.samples), default=0.0)
        requests, transactions = out.get("requests", 0.0), out.get("transactions", 0.0)
        out["requests_per_txn"] = requests / transactions if transactions else None
        calls = sum(aws_calls(out).values())
        out["aws_calls_per_request"] = calls / requests if calls and requests else None
        out["scrape_failures"] = self.failures
        return out
