"""The bench's verdict on one run: which tier limited it, and the evidence.

Read from the run's record alone (what `record.build` keeps), so a report rebuilt from old
records gets one too. The tiers are checked in this order, and the first that shows saturation is
named; the others that also do are kept as further evidence:

- the generator: its own CPU near a core — then the run measured the generator, not the
  service (sends that left late while it had CPU to spare mean every connection was waiting on
  the service: evidence for the tier named, not against the generator);
- the stream: throttled AWS calls (with the reads per second per shard, Kinesis serving 5), or
  moto's CPU near a core where moto stands in for AWS;
- the edge: its processes' CPU near their cores (a core per worker);
- Postgres: its processes' CPU near a core;
- the batcher: its lag past a second (frames fall behind the stream), or its CPU near a core;
- the machine: every process of the run together near all the machine's cores, though none
  alone was (what a 2-core machine shows first);
- the containers: the local Lambda edge's simulated containers (`--containers`, a worker's),
  each one invocation at a time, did not get the rate offered: every one was busy, and the rest
  queued for them;
- the connections: sends left late while the generator had CPU to spare, so every connection
  was waiting on a reply; the rate was connections over the time each request held one.

With none of them, a run that got the rate it was offered was below capacity; one that did not
is "unexplained", which says to look at the per-second charts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infra.adapters.limits import SHARD_READS_PER_S, SHARD_RECORDS_PER_S

NEAR = 0.85
"""The share of a limit that counts as reaching it: sampling smooths peaks away."""
LATE_SHARE = 0.01
"""Sends that left late, as a share of all, past which the generator limited the run."""
LAG_S = 1.0
"""Batcher lag past which frames are falling behind the stream."""
UNEXPLAINED = "unexplained"
MET = 0.95
"""The share of the offered rate a run must achieve to have met it."""
SLOW_HOLD = 2.0
"""An invocation that held its simulated container more than this many times its reply wait
spent the rest in the process that runs the containers, not waiting."""


@dataclass(frozen=True)
class Verdict:
    tier: str | None
    """The tier that limited the run; None when none did."""
    evidence: list[str] = field(default_factory=list)

    def head(self) -> str:
        """What the verdict says, before its evidence."""
        if self.tier is None:
            return "no tier saturated"
        if self.tier == UNEXPLAINED:
            return UNEXPLAINED
        return f"{self.tier} limited this run"

    def line(self) -> str:
        return f"verdict: {self.head()}: " + "; ".join(self.evidence)

    def to_json(self) -> dict[str, Any]:
        return {"tier": self.tier, "evidence": self.evidence, "line": self.line()}


def verdict(run: dict[str, Any]) -> Verdict:
    """The verdict on one run record."""
    found = [
        (tier, said)
        for tier, check in CHECKS
        if (said := check(run["summary"], run["service"]["totals"], run)) is not None
    ]
    s = run["summary"]
    if found:
        return Verdict(found[0][0], [f"{tier}: {said}" for tier, said in found])
    got = f"{s['rps_mean']:,.0f} of {s['offered_rps']:,.0f} rps offered answered 2xx"
    if s["offered_rps"] and s["rps_mean"] >= MET * s["offered_rps"]:
        return Verdict(None, [f"the offered rate was below capacity ({got})"])
    return Verdict(
        UNEXPLAINED,
        [f"{got}, yet no tier showed saturation; see the per-second charts"],
    )


Check = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], str | None]
"""(the run's summary, its service totals, the whole run) -> the evidence, or None."""


def _generator(s: dict[str, Any], _: dict[str, Any], run: dict[str, Any]) -> str | None:
    """The generator's own CPU near its core. (Late sends with CPU to spare mean every
    connection was waiting on a reply: `_connections`.)"""
    cpu = s.get("generator_cpu_pct") or 0.0
    if cpu < NEAR * 100:
        return None
    return f"its CPU at {cpu:.0f}% of a core; {late(s, run) or 'no send left late'}"


def late(s: dict[str, Any], run: dict[str, Any]) -> str | None:
    """The sends that left late, if they were more than a few."""
    share = s["missed_sends"] / s["requests"] if s["requests"] else 0.0
    if share < LATE_SHARE:
        return None
    worst = run.get("client", {}).get("worst_late_ms", 0.0)
    return (
        f"{s['missed_sends']:,} of {s['requests']:,} sends left more than 10 ms late "
        f"(worst {worst:,.0f} ms)"
    )


def _stream(s: dict[str, Any], totals: dict[str, Any], run: dict[str, Any]) -> str | None:
    throttles = totals.get("throttles") or 0
    shards = run.get("settings", {}).get("shards") or 0
    reads = totals.get("aws:get_records") or 0
    per_shard = reads / s["duration_s"] / shards if shards and s["duration_s"] else 0.0
    said = []
    moto = _tier_cpu(s, totals, "stream")
    if moto is not None and moto >= NEAR * 100:
        said.append(f"moto (standing in for Kinesis and DynamoDB) at {moto:.0f}% of a core")
    if throttles:  # a reader polls near 5/s by design: reads tell only beside throttles
        reads = f", GetRecords at {per_shard:.1f}/s per shard" if per_shard else ""
        said.append(
            f"{throttles:,.0f} AWS calls throttled{reads} (Kinesis serves {SHARD_READS_PER_S:g} "
            f"reads/s and {SHARD_RECORDS_PER_S:,} records/s written per shard)"
        )
    return "; ".join(said) or None


def _edge(s: dict[str, Any], totals: dict[str, Any], run: dict[str, Any]) -> str | None:
    cpu = _tier_cpu(s, totals, "edge")
    workers = run.get("settings", {}).get("workers") or 1
    if cpu is None or cpu < NEAR * 100 * workers:
        return None
    return f"CPU at {cpu:.0f}% across {workers} worker(s), a core each"


def _postgres(s: dict[str, Any], totals: dict[str, Any], _: dict[str, Any]) -> str | None:
    cpu = _tier_cpu(s, totals, "postgres")
    if cpu is None or cpu < NEAR * 100:
        return None
    return f"CPU at {cpu:.0f}% of a core ({s.get('transactions', 0):,} transactions)"


def _batcher(s: dict[str, Any], totals: dict[str, Any], _: dict[str, Any]) -> str | None:
    lag = s.get("lag_max_s") or 0.0
    cpu = _tier_cpu(s, totals, "batcher")
    said = []
    if lag > LAG_S:
        said.append(f"lag reached {lag:.1f} s")
    if cpu is not None and cpu >= NEAR * 100:
        said.append(f"CPU at {cpu:.0f}% of a core")
    return "; ".join(said) or None


def _machine(s: dict[str, Any], _: dict[str, Any], run: dict[str, Any]) -> str | None:
    cores = run.get("machine", {}).get("cpus") or 1
    used = (s.get("cpu_pct") or 0.0) + (s.get("generator_cpu_pct") or 0.0)
    if used < NEAR * 100 * cores:
        return None
    return (
        f"the service and the generator together used {used:.0f}% of its {cores} cores "
        "(run the generator elsewhere to see which tier gives first)"
    )


def _containers(s: dict[str, Any], totals: dict[str, Any], run: dict[str, Any]) -> str | None:
    """The local Lambda edge's simulated containers, one invocation each at a time, all busy:
    the rate fell short of the offered one while requests queued for a container. Whether more
    would carry more: an invocation held its container about its reply wait (they would), or
    much longer (the process that runs them all was slow: cold starts, one GIL, its CPU)."""
    settings = run.get("settings", {})
    containers = settings.get("lambda_containers")
    if settings.get("edge") != "lambda" or not containers or not s["rps_mean"]:
        return None
    if not s["offered_rps"] or s["rps_mean"] >= MET * s["offered_rps"]:
        return None
    slots = containers * (settings.get("workers") or 1)
    held = slots / s["rps_mean"]  # each invocation's time in its container, all of them busy
    said = (
        f"{slots} simulated Lambda container(s) ({containers} a worker), one invocation each at "
        f"a time, answered {s['rps_mean']:,.0f} rps: an invocation held its container about "
        f"{held * 1000:,.0f} ms (Little's law), so {s['offered_rps']:,.0f} rps needed about "
        f"{s['offered_rps'] * held:,.0f}, and the rest queued (p50 "
        f"{s['latency_p50_ms'] / 1000:,.1f} s)"
    )
    waited = totals.get("replies_waited") or 0
    wait = (totals.get("reply_wait_s") or 0.0) / waited if waited else None
    if wait is not None and held > SLOW_HOLD * wait:
        return (
            f"{said}. Of that, {wait * 1000:,.0f} ms was its wait for the reply: the rest went to "
            "the process that runs them all (cold starts, one GIL, its CPU), so more containers "
            "would not carry more here; fewer a worker (--containers) and more --workers would"
        )
    waiting = f", {wait * 1000:,.0f} ms of it waiting for the reply" if wait is not None else ""
    return (
        f"{said}{waiting}. The limit is the simulation's: more containers (numerator bench "
        "--containers N) carry more while an invocation's wait stays near this, until this "
        "machine's cores are the limit; on AWS each concurrent request gets a container of its "
        "own"
    )


def _connections(s: dict[str, Any], _: dict[str, Any], run: dict[str, Any]) -> str | None:
    """Sends left late while the generator had CPU to spare: every connection was busy."""
    waiting = late(s, run)
    connections = run.get("scenario", {}).get("connections")
    if waiting is None or not connections or not s["rps_mean"]:
        return None
    held = connections / s["rps_mean"] * 1000
    return (
        f"{waiting}: all {connections} were busy. They carried {s['rps_mean']:,.0f} rps, each "
        f"request holding one about {held:,.0f} ms (Little's law); more connections, or a "
        "shorter wait for replies, carry more"
    )


def _tier_cpu(s: dict[str, Any], totals: dict[str, Any], tier: str) -> float | None:
    """A tier's mean CPU percent in the run; the whole service's when it ran as one tier."""
    tiers = totals.get("cpu_pct_by_tier")
    value = tiers.get(tier) if tiers else s.get("cpu_pct") if tier == "edge" else None
    return None if value is None else float(value)


CHECKS: list[tuple[str, Check]] = [
    ("generator", _generator),
    ("stream", _stream),
    ("edge", _edge),
    ("postgres", _postgres),
    ("batcher", _batcher),
    ("machine", _machine),
    ("containers", _containers),
    ("connections", _connections),
]
