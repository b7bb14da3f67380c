"""`numerator plan`'s Postgres connections (numerator/plan/connections.py): RDS's default
max_connections per class, the holders of each edge, and the choice of a larger class or RDS
Proxy when they do not fit — on made-up sizings, and in the command's text and --json."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from infra.settings import Settings
from numerator.plan.connections import (
    CONNECT_S,
    DIRECT_CONNECTS_PER_S,
    OPERATORS,
    RDS_BYTES_PER_CONNECTION,
    RESERVED,
    connection_budget,
    max_connections,
    proxy_line,
)
from numerator.plan.cost import INSTANCES, PRICES, Prices
from numerator.plan.model import HEADROOM, EdgeKind, Sizing

USD = Prices.read(PRICES, "us-east-1").usd
POOL = Settings.of().database.pool_max


def test_max_connections_is_rds_default_formula_per_class() -> None:
    # LEAST({DBInstanceClassMemory/9531392}, 5000), less the superuser's reserved slots
    assert max_connections("db.t4g.small") == 2 * 2**30 // RDS_BYTES_PER_CONNECTION - RESERVED
    assert max_connections("db.t4g.small") == 222
    assert max_connections("db.m7g.large") == 901 - RESERVED
    sizes = [max_connections(name) for name in INSTANCES]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)


def server(tasks: int, batchers: int = 2, instance: str = "db.t4g.small") -> Sizing:
    made = Sizing(EdgeKind.SERVER, 1000.0, edge_tasks=tasks, batchers=batchers)
    made.instance_class = instance
    return made


def test_a_server_edge_counts_each_task_s_pool_and_its_listener() -> None:
    counted = connection_budget(server(5, batchers=3), INSTANCES, USD)
    assert counted.total == 5 * (POOL + 1) + 3 * POOL + OPERATORS
    assert counted.instance == "db.t4g.small" and not counted.proxy and not counted.larger


def test_too_many_for_the_instance_picks_the_cheaper_of_a_larger_class_and_rds_proxy() -> None:
    # past HEADROOM of a db.t4g.micro's 109: a db.t4g.small costs 2 x $0.016 more an hour
    # (Multi-AZ), RDS Proxy $0.03 (2 vCPUs): the proxy
    tasks = int(max_connections("db.t4g.micro") * HEADROOM / (POOL + 1)) + 1
    micro = connection_budget(server(tasks, instance="db.t4g.micro"), INSTANCES, USD)
    assert micro.proxy and micro.instance == "db.t4g.micro"
    assert proxy_line(micro, USD, 730) == {"RDS Proxy": pytest.approx(2 * 0.015 * 730)}
    # with RDS Proxy dearer than the step up, the larger class
    dear = {**USD, "rds_proxy_vcpu_hour": 1.0}
    larger = connection_budget(server(tasks, instance="db.t4g.micro"), INSTANCES, dear)
    assert larger.instance == "db.t4g.small" and not larger.proxy and larger.larger
    assert proxy_line(larger, dear, 730) == {}
    # more than the largest class takes: the proxy, whatever it costs
    most = int(max_connections(INSTANCES[-1]) / (POOL + 1)) + 1
    assert connection_budget(server(most), INSTANCES, dear).proxy


def test_lambda_containers_keep_none_and_their_connects_call_for_rds_proxy() -> None:
    few = Sizing(EdgeKind.LAMBDA, 100.0, concurrency=20.0, batchers=2)
    few.instance_class = "db.t4g.small"
    keys_s = Settings.of().edge.keys_refresh_s
    counted = connection_budget(few, INSTANCES, USD)
    assert counted.connects_per_s == pytest.approx(20 / keys_s)
    assert counted.total == pytest.approx(20 / keys_s * CONNECT_S + 2 * POOL + OPERATORS)
    assert not counted.proxy
    iam = connection_budget(few, INSTANCES, USD, keys=False)  # IAM authorizer: no reloads
    assert iam.connects_per_s == 0 and iam.total == 2 * POOL + OPERATORS
    many = Sizing(EdgeKind.LAMBDA, 10_000.0, concurrency=DIRECT_CONNECTS_PER_S * keys_s * 2)
    many.instance_class = "db.t4g.small"
    assert "new connections a second" in connection_budget(many, INSTANCES, USD).proxy


@pytest.mark.parametrize("rps", [10_000, 40_000])
def test_the_command_prints_and_writes_the_connections(rps: int) -> None:
    ran = [sys.executable, "-m", "numerator", "plan", "--rps", str(rps)]
    text = subprocess.run(ran, capture_output=True, text=True, timeout=60, check=True).stdout
    data = json.loads(
        subprocess.run(
            [*ran, "--json"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    )
    plans = data["plans"]
    for each in plans:
        budget = each["postgres_connections"]
        if each["edge"] == "atomic":
            assert budget is None
            continue
        assert budget["total"] == sum(budget["holders"].values())
        assert f"Postgres connections, {each['edge']} edge" in text
        said = f"in all: {budget['total']:,} of {budget['instance']}'s"
        assert said in text
        assert each["sizing"]["postgres_instance"] == budget["instance"]
        assert budget["rds_proxy"] == ("RDS Proxy" in each["cost"]["lines"])


def test_docs_plan_shows_the_connections_as_the_command_prints_them() -> None:
    """docs/plan.md's "Connections" block: each rate's lines as `numerator plan` prints them."""
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "plan.md").read_text()
    block = page.split("## Connections", 1)[1].split("```\n", 2)[1]
    for rps in (10000, 40000):
        ran = [sys.executable, "-m", "numerator", "plan", "--rps", str(rps)]
        text = subprocess.run(ran, capture_output=True, text=True, timeout=60, check=True).stdout
        printed = [part for part in text.split("\n\n") if part.startswith("Postgres connections")]
        said = block.split(f"numerator plan --rps {rps}\n", 1)[1].split("\n\nnumerator plan")[0]
        assert said.strip() == "\n\n".join(printed).strip(), f"docs/plan.md at {rps} rps"
