"""`numerator plan`'s whole bill (numerator/plan/whole.py): CloudWatch Logs from the bytes
measured, the subnets' way to AWS, data transfer out, the load balancer's capacity units, a
burstable Postgres's CPU credits; what it does not price; the recommendation and its break-even
rate (numerator/plan/advice.py). Arithmetic on made-up measurements, and the command as shipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from numerator.plan import EdgeKind, PlanError, Traffic, plan
from numerator.plan.advice import LAMBDA_PLACE, advise
from numerator.plan.cost import Prices
from numerator.plan.model import MONTH_S, Sizing
from numerator.plan.whole import (
    AWS_CALL_BYTES,
    BURSTABLE,
    DYNAMODB_CALLS,
    NOT_PRICED,
    POSTGRES_CPU_MS,
    REQUESTS_PER_CONNECTION,
    WIRE_BYTES,
    instance_class,
)
from tests.plans import MEASURED, numerator

DOC = (Path(__file__).parents[2] / "docs" / "plan.md").read_text()


def prices(path: Path | None = None) -> Prices:
    return Prices.read(path, "us-east-1")


def measured(**log_bytes: float) -> dict[str, Any]:
    return MEASURED | {"log_bytes": log_bytes}


LOGS = "CloudWatch Logs (taken in, 30 days kept)"


def test_logs_are_billed_from_the_bytes_measured_a_request_and_each_processs_emf_line() -> None:
    usd = prices().usd
    load = Traffic(10_000)
    quiet = plan(load, EdgeKind.SERVER, prices(), measured(server=0.0, server_emf_line=0.0))
    assert quiet.bill.lines[LOGS] == 0
    assert not any("--measure-logs measures them" in note for note in quiet.bill.notes)
    unknown = plan(load, EdgeKind.SERVER, prices(), MEASURED)  # an older measured.json
    assert any("--measure-logs measures them" in note for note in unknown.bill.notes)
    chatty = plan(load, EdgeKind.SERVER, prices(), measured(server=449.0, server_emf_line=0.0))
    taken_in = 10_000 * 449 * MONTH_S / 1e9
    kept = taken_in * 30 * 86_400 / MONTH_S
    per_gb = usd["cloudwatch_logs_gb"], usd["cloudwatch_logs_stored_gb_month"]
    assert chatty.bill.lines[LOGS] == pytest.approx(taken_in * per_gb[0] + kept * per_gb[1])
    lines = plan(load, EdgeKind.SERVER, prices(), measured(server=0.0, server_emf_line=300.0))
    processes = lines.sizing.edge_tasks + lines.sizing.batchers  # a line a minute each
    assert lines.bill.lines[LOGS] == pytest.approx(
        (processes * 300 / 60 * MONTH_S / 1e9) * (per_gb[0] + 30 * 86_400 / MONTH_S * per_gb[1])
    )


def test_the_subnets_way_to_aws_is_the_cheaper_of_nat_gateways_and_endpoints(
    tmp_path: Path,
) -> None:
    load = Traffic(10_000)
    shipped = plan(load, EdgeKind.LAMBDA, prices(), measured())
    [way] = [k for k in shipped.bill.lines if k.startswith(("NAT", "VPC interface"))]
    note = [n for n in shipped.bill.notes if "from the private subnets" in n]
    assert len(note) == 1 and ("NAT" in note[0]) != way.startswith("NAT")
    # the calls through them: all but DynamoDB's (its gateway endpoint is free), and the records
    through = sum(n for call, n in shipped.calls.items() if call not in DYNAMODB_CALLS)
    assert through < sum(shipped.calls.values())
    records = shipped.sizing.records_per_s * load.rps / shipped.sizing.peak_rps
    per_s = through * AWS_CALL_BYTES + 2 * records * shipped.sizing.record_bytes
    assert f"{per_s * MONTH_S / 1e9:,.0f} GB a month" in note[0]
    data = json.loads(Path(prices().source).read_text())
    costly = data["regions"]["us-east-1"]
    costly["vpc_interface_endpoint_hour"]["usd"] = 10.0
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(data))
    other = plan(load, EdgeKind.LAMBDA, prices(path), measured())
    assert "NAT gateways (2)" in other.bill.lines
    atomic = plan(load, EdgeKind.ATOMIC, prices(), measured())
    assert not [k for k in atomic.bill.lines if k.startswith(("NAT", "VPC interface"))]


def test_data_transfer_out_is_each_answers_bytes_at_the_tiers_prices() -> None:
    usd = prices().usd
    answer = 172.0
    # a rate that sends exactly 20,480 GB a month: the first tier whole, half of the second
    rps = 20_480e9 / MONTH_S / (answer + WIRE_BYTES)
    out = plan(Traffic(rps), EdgeKind.SERVER, prices(), measured(response_bytes=answer))
    expected = (
        10_240 * usd["transfer_out_gb_first_10tb"] + 10_240 * usd["transfer_out_gb_next_40tb"]
    )
    assert out.bill.lines["Data transfer out"] == pytest.approx(expected)
    atomic = plan(Traffic(rps), EdgeKind.ATOMIC, prices(), measured(response_bytes=answer))
    assert atomic.bill.lines["Data transfer out"] == pytest.approx(expected)


def test_the_load_balancers_capacity_units_follow_new_connections() -> None:
    usd, hours = prices().usd, prices().hours
    lcu = "ALB capacity units (LCUs)"
    many = plan(Traffic(10_000, new_connections=10_000), EdgeKind.SERVER, prices(), measured())
    assert many.bill.lines[lcu] == pytest.approx(10_000 / 25 * hours * usd["alb_lcu_hour"])
    assert any("set by its new connections" in note for note in many.bill.notes)
    few = plan(Traffic(10_000), EdgeKind.SERVER, prices(), measured())
    assert few.bill.lines[lcu] < many.bill.lines[lcu]
    said = f"{10_000 / REQUESTS_PER_CONNECTION:,.0f} new connections a second"
    assert any(said in note for note in few.bill.notes)
    with pytest.raises(PlanError, match="--new-connections must be"):
        Traffic(10, new_connections=-1)


def test_a_burstable_instance_pays_credits_past_its_baseline_or_gives_way() -> None:
    small = "db.t4g.small"
    vcpus, baseline = BURSTABLE[small]
    at_baseline = vcpus * baseline * 1000 / POSTGRES_CPU_MS  # transactions a second
    usd = prices()
    assert instance_class(Sizing(EdgeKind.SERVER, 1, transactions_per_s=10), 1e6, usd) == small
    busy = Sizing(EdgeKind.SERVER, 1, transactions_per_s=at_baseline * 1.5)
    assert instance_class(busy, 1e6, usd) == small  # the credits cost less than a larger class
    busy.instance_class = small
    load = Traffic(1000)
    out = plan(load, EdgeKind.SERVER, usd, MEASURED)
    assert out.sizing.instance_class == small
    credit = next(k for k in out.bill.lines if k.startswith("RDS CPU credits"))
    assert out.bill.lines[credit] >= 0
    # past what its two vCPUs hold, or past one connection's commits here: the steady class
    flat_out = Sizing(EdgeKind.SERVER, 1, transactions_per_s=vcpus * 1000 / POSTGRES_CPU_MS)
    assert instance_class(flat_out, 1e6, usd) == "db.m7g.large"
    assert instance_class(Sizing(EdgeKind.SERVER, 1, transactions_per_s=800), 1000, usd) == (
        "db.m7g.large"
    )


def test_the_recommendation_finds_where_the_bills_cross() -> None:
    def crossing(load: Traffic) -> dict[EdgeKind, float]:
        return {EdgeKind.LAMBDA: 2.0 * load.rps, EdgeKind.SERVER: 100.0 + 0.1 * load.rps}

    advice = advise(Traffic(1000), crossing)
    assert advice.break_even_rps == pytest.approx(100 / 1.9, rel=1e-6)
    assert advice.cheaper is EdgeKind.SERVER
    assert "below it the Lambda edge is cheaper" in advice.line and LAMBDA_PLACE in advice.line

    def server_always(load: Traffic) -> dict[EdgeKind, float]:
        return {EdgeKind.LAMBDA: 300.0 + load.rps, EdgeKind.SERVER: 200.0 + 0.01 * load.rps}

    always = advise(Traffic(50), server_always)
    assert always.break_even_rps is None and always.cheaper is EdgeKind.SERVER
    assert "cheaper at every rate" in always.line and LAMBDA_PLACE in always.line


def test_the_command_prints_the_whole_bill_what_it_does_not_price_and_a_recommendation() -> None:
    done = numerator("--rps", "10000")
    assert done.returncode == 0, done.stderr
    for line in (LOGS, "Data transfer out", "ALB capacity units", "Not priced", "Recommendation:"):
        assert line in done.stdout
    for item in NOT_PRICED:
        assert f"  {item}" in done.stdout
    out = json.loads(numerator("--rps", "10000", "--json", "--new-connections", "500").stdout)
    assert out["not_priced"] == list(NOT_PRICED) and out["load"]["new_connections"] == 500
    recommendation = out["recommendation"]
    assert recommendation["cheaper"] in ("lambda", "server")
    assert recommendation["line"].startswith("at 10,000 rps the ")
    for each in out["plans"]:
        assert LOGS in each["cost"]["lines"] and "Data transfer out" in each["cost"]["lines"]
    one = json.loads(numerator("--rps", "10", "--edge", "server", "--json").stdout)
    assert one["recommendation"] is None  # one edge: nothing to weigh it against
    refused = numerator("--rps", "10", "--new-connections", "-5")
    assert refused.returncode == 1 and "--new-connections must be" in refused.stderr


def test_the_plan_page_names_what_is_not_priced_and_each_assumption_of_the_whole_bill() -> None:
    for item in NOT_PRICED:
        assert item in " ".join(DOC.split()), f"docs/plan.md does not list: {item}"
    for figure in (AWS_CALL_BYTES, WIRE_BYTES, REQUESTS_PER_CONNECTION, POSTGRES_CPU_MS):
        assert f"{figure:,}" in DOC, f"docs/plan.md does not state {figure}"
