"""The bench's verdict (bench/verdict.py) on recorded runs — `numerator bench` on this project's
2-core machine, kept in runs/ — and on those runs changed one measure at a time."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench.verdict import UNEXPLAINED, verdict

RUNS = Path(__file__).parent / "runs"


def recorded(name: str) -> dict[str, Any]:
    """below: --local const(200,5s); over: --local const(20000,6s) on 512 connections;
    aws: --aws moto --edge server const(1500,6s) on 256 connections; lambda: --aws moto --edge
    lambda const(200,10s), its 8 simulated containers (2026-12-04; the per-second series cut to
    the 10 s offered). (Their `verdict` fields
    were computed again by the rule as it now stands; the measures are as recorded.)"""
    run: dict[str, Any] = json.loads((RUNS / f"{name}.json").read_text())
    return run


def test_a_run_below_capacity_names_no_tier() -> None:
    said = verdict(recorded("below"))
    assert said.tier is None
    assert said.line() == (
        "verdict: no tier saturated: the offered rate was below capacity "
        "(200 of 200 rps offered answered 2xx)"
    )


def test_an_overloaded_embedded_run_is_limited_by_its_edge_with_the_evidence() -> None:
    said = verdict(recorded("over"))
    assert said.tier == "edge"
    assert said.evidence[0] == "edge: CPU at 118% across 1 worker(s), a core each"
    assert [one.split(":")[0] for one in said.evidence] == ["edge", "machine", "connections"]
    assert said.line().startswith("verdict: edge limited this run: edge: CPU at 118%")


def test_an_aws_run_whose_connections_were_all_waiting_is_limited_by_them() -> None:
    said = verdict(recorded("aws"))
    assert said.tier == "connections"
    assert "all 256 were busy" in said.evidence[0]
    assert "about 220 ms (Little's law)" in said.evidence[0]


def test_the_local_lambda_edges_containers_are_named_when_they_held_the_rate_back() -> None:
    """`up --aws moto --edge lambda` at 200 rps offered: its 8 simulated containers, one
    invocation each at a time, answered a fifth of it while the rest queued for them (the
    verdict was "unexplained" before it knew them)."""
    run = recorded("lambda")
    said = verdict(run)
    assert said.tier == "containers"
    s = run["summary"]
    held = 8 / s["rps_mean"] * 1000
    assert said.evidence[0].startswith(
        f"containers: 8 simulated Lambda container(s) (8 a worker), one invocation each at a "
        f"time, answered {s['rps_mean']:,.0f} rps: an invocation held its container about "
        f"{held:,.0f} ms"
    )
    assert "ms of it waiting for the reply" in said.evidence[0]
    assert "more containers (numerator bench --containers N) carry more" in said.evidence[0]
    slow = copy.deepcopy(run)  # the same rate, each invocation's reply a tenth of its hold
    slow["service"]["totals"]["reply_wait_s"] /= 10
    slowed = verdict(slow)
    assert slowed.tier == "containers"
    assert "more containers would not carry more here" in slowed.evidence[0]
    met = copy.deepcopy(run)  # the rate met: the containers held it, whatever they were
    met["summary"]["rps_mean"] = met["summary"]["offered_rps"]
    assert verdict(met).tier != "containers"
    server = copy.deepcopy(run)  # another edge has no containers to blame
    server["settings"]["edge"] = "server"
    assert verdict(server).tier != "containers"


def test_the_generator_at_its_core_is_named_before_any_tier() -> None:
    run = recorded("over")
    run["summary"]["generator_cpu_pct"] = 97.0
    said = verdict(run)
    assert said.tier == "generator"
    assert said.evidence[0].startswith("generator: its CPU at 97% of a core; 37,046 of 120,000")


@pytest.mark.parametrize(
    ("change", "tier", "evidence"),
    [
        (
            lambda r: r["service"]["totals"].update(throttles=12, **{"aws:get_records": 62}),
            "stream",
            "stream: 12 AWS calls throttled, GetRecords at 8.0/s per shard",
        ),
        (
            lambda r: r["service"]["totals"]["cpu_pct_by_tier"].update(stream=96.0),
            "stream",
            "stream: moto (standing in for Kinesis and DynamoDB) at 96% of a core",
        ),
        (
            lambda r: r["service"]["totals"]["cpu_pct_by_tier"].update(edge=90.0),
            "edge",
            "edge: CPU at 90% across 1 worker(s)",
        ),
        (
            lambda r: r["service"]["totals"]["cpu_pct_by_tier"].update(postgres=93.0),
            "postgres",
            "postgres: CPU at 93% of a core",
        ),
        (lambda r: r["summary"].update(lag_max_s=4.2), "batcher", "batcher: lag reached 4.2 s"),
        (
            lambda r: r["summary"].update(cpu_pct=150.0, generator_cpu_pct=40.0),
            "machine",
            "machine: the service and the generator together used 190% of its 2 cores",
        ),
    ],
)
def test_each_tier_is_named_on_its_own_evidence(change: Any, tier: str, evidence: str) -> None:
    run = recorded("aws")
    run["summary"]["missed_sends"] = 0  # no connection waited: only the changed measure shows
    assert verdict(run).tier is UNEXPLAINED  # 1,164 of 1,500 rps, and no evidence why
    changed = copy.deepcopy(run)
    change(changed)
    said = verdict(changed)
    assert said.tier == tier
    assert said.evidence[0].startswith(evidence)


def test_a_short_run_with_no_evidence_says_so() -> None:
    run = recorded("aws")
    run["summary"]["missed_sends"] = 0
    said = verdict(run)
    assert said.line() == (
        "verdict: unexplained: 1,164 of 1,500 rps offered answered 2xx, yet no tier showed "
        "saturation; see the per-second charts"
    )
    assert said.to_json()["tier"] == UNEXPLAINED


def test_a_run_record_keeps_its_verdict() -> None:
    run = recorded("below")  # recorded by numerator bench: record.build put it there
    assert run["verdict"] == verdict(run).to_json()
