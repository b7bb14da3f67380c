"""`numerator plan`: the model's arithmetic on made-up measurements, its errors, the prices file's
checks, and the command as a user runs it (on the shipped measured.json and prices.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from infra.adapters.limits import SHARD_RECORDS_PER_S
from infra.settings import Settings
from numerator.plan import EdgeKind, PlanError, Traffic, plan
from numerator.plan.cost import PRICES, Prices, tiered
from numerator.plan.latency import SERVER_P95_MS, budget, p95
from numerator.plan.model import (
    HEADROOM,
    MONTH_S,
    Fit,
    Measured,
    Unit,
    fit,
    front_frames_per_s,
    second_chances,
)
from tests.plans import MEASURED, numerator

LOGGED = {"lambda": 0.0, "lambda_emf_line": 279.0, "atomic": 0.0, "server": 0.0,
          "server_emf_line": 279.0, "response_bytes": 172.0}  # fmt: skip
"""What `measure.log_bytes` measures (numerator/plan/logprobe.py runs the edges): stood in for."""


def prices() -> Prices:
    return Prices.read(None, "us-east-1")


def test_a_fit_splits_the_fixed_part_per_unit_from_the_part_per_request() -> None:
    assert fit([(100, 12.0), (300, 16.0)], units=2) == Fit(5.0, 0.02)
    assert fit([(100, 10.0), (300, 30.0)], units=0) == Fit(0.0, 0.1)  # Lambda: per request
    through = fit([(100, 5.0), (300, 31.0)], units=1)  # a negative intercept: through the origin
    assert through.fixed == 0 and math.isclose(through.per_request, (500 + 9300) / 100_000)
    assert fit([(100, 9.0), (300, 7.0)], units=1) == Fit(8.0, 0.0)  # falling: a constant


def test_the_calls_scale_their_fixed_part_with_the_units_a_deployment_has() -> None:
    server = Measured.of(EdgeKind.SERVER, MEASURED["edges"]["server"])
    # the runs' fixed 20 ms front frames: 50 a second a process, so a put a frame
    calls = server.calls(10_000, {Unit.FRONT: 4 * 30, Unit.SHARD: 3, Unit.PROCESS: 6})
    assert math.isclose(calls["put_record"], 120)  # a put for each of 4 processes' 30 frames
    assert math.isclose(calls["get_records"], 15)  # 5 for each of 3 shards
    assert math.isclose(calls["batch_get_item"], 30 / 50 * 120 + 0.01 * 10_000)


def test_the_lambda_edge_puts_a_record_per_request_and_sizes_concurrency_by_littles_law() -> None:
    load = Traffic(10_000, counters=10, hot_share=0.5, peak_to_mean=2)
    out = plan(load, EdgeKind.LAMBDA, prices(), MEASURED)
    assert out.sizing.records_per_s == 20_000
    assert out.sizing.shards == math.ceil(20_000 / (SHARD_RECORDS_PER_S * HEADROOM))
    # measured 200 ms with a read half a beat (100 ms) off; on the plan's 29 shards' phased
    # beats, half the gap between phases: 200 / 29 / 2 ms
    assert out.sizing.measured_wait_s == pytest.approx(0.2)
    assert out.sizing.reply_wait_s == pytest.approx(0.2 - 0.1 + 0.1 / out.sizing.shards)
    assert out.sizing.concurrency == pytest.approx(20_000 * out.sizing.reply_wait_s)
    assert out.sizing.partition_spread == math.ceil(10_000 / (SHARD_RECORDS_PER_S * HEADROOM))
    assert out.sizing.batchers == math.ceil(out.sizing.shards / 4)
    assert out.calls["put_record"] == pytest.approx(10_000)
    states = {limit.name: limit.state for limit in out.limits}
    assert states["Lambda concurrent executions (account default)"] == "crossed"
    assert states["API Gateway HTTP API requests/s (account default throttle)"] == "crossed"
    requests = 10_000 * MONTH_S / 1e6
    assert out.bill.lines["API Gateway HTTP API"] == pytest.approx(tiered(requests, 300, 1, 0.9))
    assert out.bill.per_million == pytest.approx(out.bill.total / requests)


def test_the_server_edge_puts_a_record_per_counter_per_front_frame() -> None:
    load = Traffic(1_000, counters=1, hot_share=1, peak_to_mean=1)
    out = plan(load, EdgeKind.SERVER, prices(), MEASURED)
    # CPU 0.2 + 0.0002 per rps: at 60 % a process serves 2,000 rps; two tasks at least
    assert out.sizing.rps_per_task == pytest.approx(2_000)
    assert out.sizing.edge_tasks == 2
    # one counter, on phased beats (the default): the least shards at which the p95 is within
    # SERVER_P95_MS (numerator/plan/latency.py), a frame at each shard's read (no two closer
    # than FRONT_FRAME_MS), and no second chance: the next read is near
    shards = out.sizing.shards
    commit_ms = 1000 / MEASURED["commits_per_s"]
    fewer = budget(EdgeKind.SERVER, Settings.of(), commit_ms, shards=shards - 1)
    assert p95(out.hops) <= SERVER_P95_MS < p95(fewer)
    assert out.sizing.fronts_per_s == pytest.approx(shards / 0.2)
    assert out.sizing.records_per_s == pytest.approx(2 * shards / 0.2)
    assert out.sizing.batchers == max(2, math.ceil(shards / 4))
    assert "Lambda requests" not in out.bill.lines and "Fargate edge tasks" in out.bill.lines
    # on shared beats: a frame at each of the one shard's five reads, and its second chance
    # (functions/front.py): two records a read from each task; more shards bring none nearer
    shared = Settings.of(read_beats="shared")
    out = plan(load, EdgeKind.SERVER, prices(), MEASURED, settings=shared)
    assert out.sizing.fronts_per_s == pytest.approx(5)
    assert out.sizing.records_per_s == pytest.approx(2 * (5 + 5))
    assert (out.sizing.shards, out.sizing.batchers) == (1, 2)
    assert p95(out.hops) > 2 * SERVER_P95_MS  # a beat's wait, spread over 200 ms


def test_the_reply_table_is_billed_by_the_units_measured_scaled_by_front_frames() -> None:
    """Replies a frame at a time: an item per front frame (write units fixed per frame, plus
    their bytes per request), read by its edge's Query (fixed per frame, plus bytes per
    request); an edge puts a frame at each shard's read on phased beats, at most one a
    FRONT_FRAME_MS, and one a beat on shared beats. Made up, on two shards' phased beats (10
    frames a second an edge): 5 write units a second an edge + 0.001 per request; 20 read units
    + 0.002 per request."""
    measured = json.loads(json.dumps(MEASURED))
    for one in measured["edges"]["server"]:
        rps, seconds = one["rps"], one["duration_s"]
        one.update(shards=2, read_beats="phased", front_frame_policy="beats", front_frame_ms=20)
        one["reply_units"] = {
            "write": (5 + 0.001 * rps) * seconds,
            "read": (20 + 0.002 * rps) * seconds,
        }
    load = Traffic(10_000, counters=10, hot_share=0.5, peak_to_mean=2)
    shared = Settings.of(read_beats="shared")
    out = plan(load, EdgeKind.SERVER, prices(), measured, settings=shared)
    # on shared beats: a frame a beat, five a second an edge
    fronts = out.sizing.edge_tasks * front_frames_per_s(
        out.sizing.shards, 0.2, 0.02, "beats", False
    )
    assert fronts == pytest.approx(out.sizing.edge_tasks * 5)
    items = min(out.sizing.batchers, out.sizing.shards)  # an item per batcher holding records
    write = 5 / 10 * fronts * items + 0.001 * 10_000
    read = 20 / 10 * fronts + 0.002 * 10_000
    assert out.reply_units == {"write": pytest.approx(write), "read": pytest.approx(read)}
    expected = MONTH_S / 1e6 * (write * 0.625 + read * 0.125)
    assert on_demand(out) == pytest.approx(expected, abs=0.5)  # a note is in whole dollars
    old = plan(load, EdgeKind.SERVER, prices(), MEASURED)  # no units measured: estimated from calls
    assert on_demand(old) != on_demand(out)
    # many shards on shared beats: a frame's records (one a counter) reach every batcher, and
    # each batcher's gathered publish writes an item for the edge
    heavy = Traffic(100_000, counters=10, hot_share=0.5, peak_to_mean=2)
    big = plan(heavy, EdgeKind.SERVER, prices(), measured, settings=shared)
    many = min(big.sizing.batchers, big.sizing.shards)
    assert many > 1, "the test means nothing where one batcher holds every shard"
    fronts = big.sizing.edge_tasks * 5
    assert big.reply_units["write"] == pytest.approx(5 / 10 * fronts * many + 0.001 * 100_000)
    assert big.reply_units["read"] == pytest.approx(20 / 10 * fronts + 0.002 * 100_000)


def on_demand(out: Any) -> float:
    """The reply table on demand, as its line or, where provisioned is cheaper, its note."""
    line = out.bill.lines.get("DynamoDB reply table, on demand")
    if line is not None:
        return float(line)
    (note,) = [n for n in out.bill.notes if n.startswith("the reply table on demand")]
    return float(note.split("$")[1].split()[0].replace(",", ""))


def test_the_reply_table_is_provisioned_at_its_peak_over_the_target_where_that_is_cheaper() -> None:
    """Provisioned units cost the same all month, so a steady load (the peak at the mean) takes
    them, sized at the peak's units over the auto scaling target; a spiky one stays on demand
    (prices.json: $0.625 a million writes on demand against $0.00065 a unit-hour: a unit is
    cheaper kept than bought once it is used about 29 % of the time, before the target)."""
    measured = json.loads(json.dumps(MEASURED))
    for one in measured["edges"]["lambda"]:  # an item per request, read 1.02 times
        one["reply_units"] = {"write": one["rps"] * one["duration_s"]}
        one["reply_units"]["read"] = 1.02 * one["reply_units"]["write"]
    steady = plan(Traffic(10_000, 10, 0.5, peak_to_mean=1), EdgeKind.LAMBDA, prices(), measured)
    assert steady.reply_units == {"write": pytest.approx(10_000), "read": pytest.approx(10_200)}
    assert steady.sizing.reply_capacity == {"write": 14_286, "read": 14_572}  # over REPLY_TARGET
    held = steady.sizing.reply_capacity
    assert steady.bill.provisioned_replies
    assert steady.bill.lines["DynamoDB reply table, provisioned"] == pytest.approx(
        730 * (held["write"] * 0.00065 + held["read"] * 0.00013)
    )
    assert on_demand(steady) > steady.bill.lines["DynamoDB reply table, provisioned"]
    assert any("DynamoDB provisioned reply table" in limit.name for limit in steady.limits)
    spiky = plan(Traffic(10_000, 10, 0.5, peak_to_mean=20), EdgeKind.LAMBDA, prices(), measured)
    assert not spiky.bill.provisioned_replies
    assert "DynamoDB reply table, provisioned" not in spiky.bill.lines
    (note,) = [n for n in spiky.bill.notes if n.startswith("the reply table provisioned")]
    assert f"{spiky.sizing.reply_capacity['write']:,} write" in note
    quotas = [limit for limit in spiky.limits if "on-demand reply table" in limit.name]
    assert [q.limit for q in quotas] == [4_000, 40_000]  # at first, and a table's quota
    assert all(q.state == "crossed" for q in quotas)  # a peak 20 times 10,000 rps
    assert steady.to_json()["sizing"]["reply_table"] == {"mode": "PROVISIONED", "units": held}
    assert spiky.to_json()["sizing"]["reply_table"] == {"mode": "PAY_PER_REQUEST"}


def test_the_p95_is_that_of_the_even_waits_added_to_the_figures() -> None:
    """One even wait of 100 ms: its 95th percentile, 95 ms, past the fixed hops; two of 100 ms:
    their sum's, 200 - sqrt(0.1) * 100 (the triangle's tail); none: the figures' sum."""
    from numerator.plan.latency import Hop

    fixed = [Hop("a call", 10.0, "x"), Hop("another", 5.0, "y")]
    assert p95(fixed) == pytest.approx(15.0)
    one = [*fixed, Hop("a beat", 50.0, "z", spread=100.0)]
    assert p95(one) == pytest.approx(15.0 + 95.0, abs=0.11)
    two = [*one, Hop("another beat", 50.0, "z", spread=100.0)]
    assert p95(two) == pytest.approx(15.0 + 200 - math.sqrt(0.1) * 100, abs=0.2)


def test_the_latency_budget_adds_its_hops_and_fan_out_changes_the_batchers_read() -> None:
    from infra.settings import Settings
    from numerator.plan.latency import budget, figures, found_after, p50

    settings = Settings.of()
    got = figures()
    call = got["kinesis_call_ms"]["ms"]
    for edge in (EdgeKind.SERVER, EdgeKind.LAMBDA):
        polled = budget(edge, settings, commit_ms=2.0, shards=10)
        pushed = budget(edge, settings, commit_ms=2.0, fan_out=True)
        read = next(h for h in polled if h.name.startswith("the batcher's read"))
        if edge is EdgeKind.SERVER:  # beats front frames: a put's margin, a GetRecords
            assert read.ms == pytest.approx(call + 2 + call)
            shared = budget(edge, settings.but(read_beats="shared"), commit_ms=2.0, shards=10)
            front = next(h for h in shared if h.name.startswith("the front frame"))
            assert front.ms == pytest.approx(settings.aws.read_interval_ms / 2)  # a beat's frame
            assert front.spread == pytest.approx(settings.aws.read_interval_ms)
            front = next(h for h in polled if h.name.startswith("the front frame"))
            # phased (the default): a frame at each of 10 shards' reads, 20 ms apart: half the
            # gap between two frames
            assert front.ms == pytest.approx(settings.aws.read_interval_ms / 10 / 2)
            assert front.spread == pytest.approx(settings.aws.read_interval_ms / 10)
        else:  # phased: a put's margin, half the gap between 10 shards' phases, a GetRecords
            assert read.ms == pytest.approx(call + 2 + settings.aws.read_interval_ms / 20 + call)
        assert p50(polled) == pytest.approx(sum(h.ms for h in polled))
        efo = got["kinesis_efo_propagation_ms"]["ms"]
        waits = [
            sum(h.ms for h in hops if h.name.startswith(("the front frame", "the batcher's read")))
            for hops in (polled, pushed)
        ]
        assert p50(polled) - p50(pushed) == pytest.approx(waits[0] - waits[1], abs=40)
        assert next(h.ms for h in pushed if "fan-out" in h.name) == efo  # the push, no beat
        assert all(h.source for h in polled)
    # the server edge takes its replies pushed (REPLY_PUSH), the table's write and read not on
    # its way; with it off, it reads them from the table as the Lambda edge does
    names = [h.name for h in budget(EdgeKind.SERVER, settings, commit_ms=2.0)]
    assert names[-1].startswith("the push") and not any("reply" in n for n in names), names
    off = [h.name for h in budget(EdgeKind.SERVER, settings.but(reply_push="off"), commit_ms=2.0)]
    assert off[-2:] == [
        "the reply write (BatchWriteItem)",
        "the reply read (Query, or BatchGetItem)",
    ]
    assert not any(n.startswith("the push") for n in off)
    # a reply is read at the first of the edge's reads (a lag after its beat, then a beat
    # apart) not before it is written
    assert found_after(0.03, lag_s=0.05, interval_s=0.2) == pytest.approx(0.05)
    assert found_after(0.06, lag_s=0.05, interval_s=0.2) == pytest.approx(0.25)
    assert found_after(0.3, lag_s=0.05, interval_s=0.2) == pytest.approx(0.45)
    with pytest.raises(PlanError):
        budget(EdgeKind.ATOMIC, settings, 1.0)


def test_the_atomic_counter_takes_one_write_per_request_on_one_item_per_counter() -> None:
    load = Traffic(10_000, counters=10, hot_share=0.5, peak_to_mean=2)
    out = plan(load, EdgeKind.ATOMIC, prices(), MEASURED)
    assert out.calls == {"update_item": pytest.approx(10_000)}
    assert out.sizing.concurrency == pytest.approx(20_000 * 0.010)
    assert (out.sizing.shards, out.sizing.batchers) == (0, 0)
    hot = next(limit for limit in out.limits if "one item" in limit.name)
    assert (hot.need, hot.state) == (10_000, "crossed")
    assert out.bill.lines["DynamoDB counter table (UpdateItem ADD)"] == pytest.approx(
        10_000 * MONTH_S / 1e6 * 0.625
    )
    assert not any("Kinesis" in line or "RDS" in line for line in out.bill.lines)


@pytest.mark.parametrize(
    ("load", "says"),
    [
        (dict(rps=-5), "--rps must be a positive"),
        (dict(rps=float("nan")), "--rps must be a positive"),
        (dict(rps=10, hot_share=1.5), "--hot-share"),
        (dict(rps=10, counters=0), "--counters"),
        (dict(rps=10, counters=1, hot_share=0.5), "--hot-share must be 1 with one counter"),
        (dict(rps=10, count=0), "--count"),
        (dict(rps=10, peak_to_mean=0.5), "--peak-to-mean"),
    ],
)
def test_bad_input_is_refused_naming_the_option(load: dict[str, Any], says: str) -> None:
    with pytest.raises(PlanError, match=says):
        Traffic(**load)


def test_a_prices_file_missing_a_price_or_a_region_is_refused_naming_it(tmp_path: Path) -> None:
    shipped = json.loads(PRICES.read_text())
    for name, item in shipped["regions"]["us-east-1"].items():
        assert item["source"].startswith("https://aws.amazon.com/"), name
    del shipped["regions"]["us-east-1"]["kinesis_shard_hour"]
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(shipped))
    with pytest.raises(PlanError, match="lacks kinesis_shard_hour for us-east-1"):
        Prices.read(path, "us-east-1")
    with pytest.raises(PlanError, match=r"no prices for eu-west-1 \(it has us-east-1\)"):
        Prices.read(path, "eu-west-1")
    shipped["regions"]["us-east-1"]["alb_hour"]["usd"] = "cheap"
    path.write_text(json.dumps(shipped))
    with pytest.raises(PlanError, match="alb_hour usd must be a number"):
        Prices.read(path, "us-east-1")
    path.write_text("{")
    with pytest.raises(PlanError, match="is not JSON"):
        Prices.read(path, "us-east-1")
    with pytest.raises(PlanError, match="cannot read the prices file"):
        Prices.read(tmp_path / "absent.json", "us-east-1")


def test_the_command_plans_both_edges_side_by_side_from_the_shipped_files() -> None:
    done = numerator("--rps", "40000")
    assert done.returncode == 0, done.stderr
    for line in ("lambda edge", "server edge", "atomic counter", "total a month", "Limits"):
        assert line in done.stdout
    out = json.loads(numerator("--rps", "40000", "--json").stdout)
    assert [p["edge"] for p in out["plans"]] == ["lambda", "server", "atomic"]
    for each in out["plans"][:2]:
        assert each["sizing"]["shards"] >= 1 and each["sizing"]["batchers"] >= 2
    for each in out["plans"]:
        assert each["aws_calls_per_s"] and each["cost"]["total_usd_per_month"] > 0
    one = json.loads(numerator("--rps", "100", "--counters", "1", "--json").stdout)
    assert one["load"]["hot_share"] == 1.0  # one counter takes every request
    lam, server, atomic = out["plans"]
    assert atomic["aws_calls_per_request"] == pytest.approx(1.0, abs=0.05)
    assert "a retried request takes a second" in done.stdout
    assert server["cost"]["usd_per_million_requests"] < lam["cost"]["usd_per_million_requests"]
    for each in (lam, server):  # the latency budget, with and without enhanced fan-out
        budget = each["latency_budget"]
        assert budget["p50_ms"] == pytest.approx(sum(h["ms"] for h in budget["hops"]), abs=0.5)
        assert budget["with_enhanced_fan_out"]["usd_per_month"] > 0
    # fan-out's push (70 ms) does not beat phased beats' on the shards the server edge is sized
    # for (its p95 within SERVER_P95_MS, each hop's source said), nor the Lambda edge's, which
    # would wait longer, and bill more
    assert server["latency_budget"]["p95_ms"] <= SERVER_P95_MS
    assert (
        server["latency_budget"]["with_enhanced_fan_out"]["p50_ms"]
        > server["latency_budget"]["p50_ms"]
    )
    assert lam["latency_budget"]["p95_ms"] > lam["latency_budget"]["p50_ms"]
    assert "Where each hop's figure comes from:" in done.stdout
    fanned = lam["latency_budget"]["with_enhanced_fan_out"]
    assert fanned["p50_ms"] > lam["latency_budget"]["p50_ms"]
    assert fanned["saves_lambda_duration_usd_per_month"] < 0
    assert atomic["latency_budget"] is None
    assert "Latency budget per hop" in done.stdout


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["--rps", "-1"], 1, "--rps must be a positive number"),
        (["--rps", "ten"], 2, "not a number: 'ten'"),
        (["--rps", "10", "--edge", "ec2"], 2, "invalid choice: 'ec2'"),
        (["--rps", "10", "--region", "mars-1"], 1, "no prices for mars-1"),
        ([], 1, "--rps is needed"),
        (["--rps", "10", "--counters", "1", "--hot-share", "0.5"], 1, "must be 1 with one"),
        (["--rps", "10", "--edge", "server", "--url"], 1, "the server edge has none"),
        (["--rps", "10", "--memory", "64"], 1, "--memory must be from 128 to 10,240 MB"),
        (["--rps", "10", "--memory", "20000"], 1, "--memory must be from 128 to 10,240 MB"),
    ],
)
def test_the_command_says_what_is_wrong(argv: list[str], code: int, says: str) -> None:
    done = numerator(*argv)
    assert done.returncode == code and says in done.stderr, done.stderr


def test_the_measure_says_the_edges_cpu_fit_and_how_far_each_run_is_from_it() -> None:
    from numerator.plan.measure import cpu_fit

    on_line = [{"rps": r, "edge_cpu_pct": 25 + 0.02 * r} for r in (300.0, 650.0, 1000.0)]
    said = cpu_fit(on_line)
    assert said.startswith("server edge CPU: 25.0% of a core + 0.200 ms a request"), said
    assert said.count("(+0%)") == 3, said
    slow = [*on_line[:2], {"rps": 1000.0, "edge_cpu_pct": 36.0}]  # a slow phase: 9 points short
    said = cpu_fit(slow)
    assert "1000 rps 36.0 % (-" in said and "(+0%)" not in said, said


def test_the_measure_runs_a_rate_again_that_moto_did_not_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from numerator.plan import measure

    served = iter([0.80, 0.99])  # the first server run served 80 % of its rate, then 99 %
    asked: list[tuple[EdgeKind, float]] = []

    def bench(edge: EdgeKind, rate: float) -> dict[str, Any]:
        asked.append((edge, rate))
        share = next(served, 1.0) if edge is EdgeKind.SERVER and rate == 300 else 1.0
        return {"rps": rate * share, "edge_cpu_pct": 20 + rate / 50, "latency_mean_ms": 100.0}

    monkeypatch.setattr(measure, "bench", bench)
    monkeypatch.setattr(measure, "invocation_cpu", lambda say: {"lambda": 20.0, "atomic": 4.0})
    monkeypatch.setattr(measure, "commits_per_second", lambda: 1000.0)
    monkeypatch.setattr(measure, "log_bytes", lambda say: dict(LOGGED))  # no processes here
    out = measure.measure(tmp_path / "measured.json", say=lambda line: None)
    assert out["invocation_cpu_ms"] == {"lambda": 20.0, "atomic": 4.0}
    assert asked.count((EdgeKind.SERVER, 300.0)) == 2
    assert out["edges"]["server"][0]["rps"] == pytest.approx(297.0)
    assert [d["rps"] for d in out["discarded"] if d["edge"] == "server"] == [240.0]


def test_the_measure_of_one_edge_keeps_the_others_runs_and_their_dates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`numerator plan --measure --edge lambda`: the Lambda edge measured again, the server's
    and the atomic counter's runs kept as they were, each edge with the date it was measured."""
    from numerator.plan import measure
    from numerator.plan.render import when

    asked: list[EdgeKind] = []
    waits = iter([140.0, 95.0, 154.0, 325.0, 96.0, 300.0, 500.0, 450.0, 470.0, 520.0])

    def bench(edge: EdgeKind, rate: float) -> dict[str, Any]:
        asked.append(edge)
        wait = next(waits)
        return {"rps": rate, "edge_cpu_pct": 20 + rate / 50, "new": True, "latency_mean_ms": wait}

    path = tmp_path / "measured.json"
    old = {"discarded": [{"edge": "server", "rps": 1}], "invocation_cpu_ms": {"atomic": 3.0}}
    path.write_text(json.dumps(MEASURED | old))
    monkeypatch.setattr(measure, "bench", bench)
    cpu = {"lambda": 20.0, "atomic": 4.0}  # the probe times both Lambdas
    monkeypatch.setattr(measure, "invocation_cpu", lambda say: cpu)
    monkeypatch.setattr(measure, "commits_per_second", lambda: 1000.0)
    monkeypatch.setattr(measure, "log_bytes", lambda say: dict(LOGGED))  # no processes here
    out = measure.measure(path, say=lambda line: None, only={EdgeKind.LAMBDA})
    assert asked == [EdgeKind.LAMBDA] * 10  # five runs of each of its two rates
    assert out["invocation_cpu_ms"] == cpu
    assert all(run.get("new") for run in out["edges"]["lambda"])
    # the run of median wait kept at each rate, the others set aside: a lucky or unlucky
    # phase of moto's is not what the plan bills
    assert [run["latency_mean_ms"] for run in out["edges"]["lambda"]] == [140.0, 470.0]
    assert out["edges"]["server"] == MEASURED["edges"]["server"]
    assert out["edges"]["atomic"] == MEASURED["edges"]["atomic"]
    assert out["discarded"][0] == {"edge": "server", "rps": 1}
    set_aside = [d["latency_mean_ms"] for d in out["discarded"][1:]]
    assert set_aside == [95.0, 96.0, 154.0, 325.0, 300.0, 450.0, 500.0, 520.0]
    at = out["edges_measured_at"]
    assert at["server"] == at["atomic"] == MEASURED["measured_at"] != at["lambda"]
    assert json.loads(path.read_text()) == out
    said = when(out)
    assert "server 2026-12-01" in said and f"lambda {at['lambda'][:10]}" in said


def test_frames_and_the_lambda_edges_reply_writes_and_listings_are_worked_out_not_fitted() -> None:
    """A bench at a few requests a second on four shards finds most reads empty and writes a
    reply a BatchWriteItem; at the plan's rates every read finds records and a call takes 25
    replies. Its containers list the shards at their start and every 5 minutes."""
    from batcher.worker import SHARDS_EVERY_S as BATCHERS_LIST_EVERY_S
    from infra.adapters.kinesis import SHARDS_EVERY_S
    from numerator.plan.model import back_frames_per_s

    assert back_frames_per_s(1e6, 4, 0.2) == pytest.approx(20)  # every read of every shard
    assert back_frames_per_s(0.5, 4, 0.2) == pytest.approx(0.5, rel=0.02)  # each record alone
    assert back_frames_per_s(20, 4, 0.2) == pytest.approx(20 * (1 - math.exp(-1)))
    load = Traffic(10_000, counters=10, hot_share=0.5, peak_to_mean=2)
    out = plan(load, EdgeKind.LAMBDA, prices(), MEASURED)
    frames = out.sizing.shards * 5  # at 10,000 rps on 29 shards: every read
    assert out.calls["batch_write_item"] == pytest.approx(frames + (10_000 - frames) / 25, rel=1e-3)
    containers = 10_000 * out.sizing.reply_wait_s
    listed = out.sizing.batchers / BATCHERS_LIST_EVERY_S + containers / SHARDS_EVERY_S
    assert out.calls["list_shards"] == pytest.approx(listed)
    assert out.sizing.transactions_per_s == pytest.approx(frames, rel=1e-3)  # a read, a frame


def test_a_lambdas_cpu_is_billed_at_its_memorys_share_of_a_vcpu() -> None:
    """The bench runs a container on a whole core, so its wait holds its CPU once: at 512 MB
    (0.29 vCPU) the same CPU takes 1769/512 times as long, and the rest is billed beside the
    wait; the concurrency follows. Other memory sizes are priced in the notes, and the
    latency budget has the CPU's hop."""
    from numerator.plan.model import VCPU_MB

    load = Traffic(10_000, 10, 0.5, 1, 2.0)
    without = plan(load, EdgeKind.LAMBDA, prices(), MEASURED)
    cpu = MEASURED | {"invocation_cpu_ms": {"lambda": 20.0, "atomic": 5.0}}
    at512 = plan(load, EdgeKind.LAMBDA, prices(), cpu)
    assert without.sizing.duration_s == without.sizing.reply_wait_s  # no CPU measured: as before
    more = 0.020 * (VCPU_MB / 512 - 1)
    assert at512.sizing.duration_s == pytest.approx(at512.sizing.reply_wait_s + more)
    assert at512.sizing.concurrency == pytest.approx(load.peak * at512.sizing.duration_s)
    ratio = at512.bill.lines["Lambda duration"] / without.bill.lines["Lambda duration"]
    assert ratio == pytest.approx(at512.sizing.duration_s / without.sizing.reply_wait_s, rel=0.01)
    at256 = plan(load, EdgeKind.LAMBDA, prices(), cpu, memory=256)
    assert at256.sizing.duration_s > at512.sizing.duration_s  # half the CPU share: slower
    assert f"at 256 MB a Lambda would cost ${at256.bill.total:,.0f}" in " ".join(at512.bill.notes)
    assert any(h.name.startswith("the function's CPU at 0.29 vCPU") for h in at512.hops)
    atomic = plan(load, EdgeKind.ATOMIC, prices(), cpu)
    assert atomic.sizing.duration_s == pytest.approx(
        atomic.sizing.reply_wait_s + 0.005 * (VCPU_MB / 512 - 1)
    )


def test_a_function_url_takes_api_gateways_line_and_throttle_out_and_is_noted_beside() -> None:
    load = Traffic(10_000, counters=10, hot_share=0.5, peak_to_mean=2)
    for edge in (EdgeKind.LAMBDA, EdgeKind.ATOMIC):
        gateway = plan(load, edge, prices(), MEASURED)
        url = plan(load, edge, prices(), MEASURED, url=True)
        assert url.sizing.url and not gateway.sizing.url
        assert "API Gateway HTTP API" not in url.bill.lines
        line = gateway.bill.lines["API Gateway HTTP API"]
        assert url.bill.total == pytest.approx(gateway.bill.total - line)
        assert url.sizing.duration_s == gateway.sizing.duration_s  # the same Lambda
        names = {limit.name for limit in url.limits}
        assert not any("API Gateway" in name for name in names)
        assert any("API Gateway" in limit.name for limit in gateway.limits)
        (note,) = [n for n in gateway.bill.notes if n.startswith("through a function URL")]
        assert f"${url.bill.total:,.0f} a month (${url.bill.per_million:.2f} a million)" in note
        assert not any(n.startswith("through a function URL") for n in url.bill.notes)
        assert url.to_json()["sizing"]["front"] == "function URL"
        assert gateway.to_json()["sizing"]["front"] == "API Gateway HTTP API"
        how = "FunctionUrl=true, --url" if edge is EdgeKind.LAMBDA else "--url"
        assert f"through a function URL ({how})" in note  # the template deploys the edge's only
    server = plan(load, EdgeKind.SERVER, prices(), MEASURED, url=True)
    assert not server.sizing.url, "the server edge has no function"
    assert server.to_json()["sizing"]["front"] == "Application Load Balancer"
    atomic = plan(load, EdgeKind.ATOMIC, prices(), MEASURED)
    assert atomic.to_json()["sizing"]["reply_table"] is None, "it has no reply table"


def test_the_probe_is_run_again_and_each_lambdas_median_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess as real

    from numerator.plan import measure

    printed = iter(
        orjson.dumps({"invocation_cpu_ms": {"lambda": edge, "atomic": atomic}}).decode()
        for edge, atomic in ((15.0, 4.8), (10.6, 4.0), (12.8, 4.6))
    )

    def run(argv: list[str], **_: Any) -> real.CompletedProcess[str]:
        assert argv[1:] == ["-m", "numerator.plan.probe"]
        return real.CompletedProcess(argv, 0, "warming up\n" + next(printed) + "\n", "")

    monkeypatch.setattr(measure.subprocess, "run", run)
    said: list[str] = []
    assert measure.invocation_cpu(said.append, runs=3) == {"lambda": 12.8, "atomic": 4.6}
    assert "lambda: 15, 10.6, 12.8 ms" in said[-1]


def test_the_measure_bills_the_wait_of_a_warm_run_not_of_its_first_seconds() -> None:
    """A run warms up for WARM_S at its rate before the step whose latency the plan keeps: a
    run's first seconds (cold containers, lags and shards still being learned) took 294 to 109 ms
    where the warm seconds took 72 to 86 (2026-12-03)."""
    from numerator.plan.measure import SECONDS, WARM_S, kept

    schedule = f"const(6,{WARM_S}s) const(6,{SECONDS}s)"
    run = {
        "scenario": {"schedule": schedule},
        "summary": {"rps_mean": 6.0, "duration_s": 18.0, "latency_mean_ms": 108.4},
        "settings": {"workers": 1, "shards": 4, "read_beats": "phased", "batchers": 1},
        "service": {"totals": {"aws:put_record": 108.0, "aws_s:put_record": 0.9}},
        "steps": [
            {"offered_rps": 6, "latency_mean_ms": 124.0, "latency_p50_ms": 111.0},
            {"offered_rps": 6, "latency_mean_ms": 76.5, "latency_p50_ms": 74.0},
        ],
    }
    out = kept(EdgeKind.LAMBDA, 6.0, run)
    assert (out["latency_mean_ms"], out["latency_p50_ms"]) == (76.5, 74.0)
    assert out["schedule"] == schedule and out["rps"] == 6.0
    assert out["calls"] == {"put_record": 108.0} and out["call_ms"] == {"put_record": 8.33}


def test_an_edge_puts_a_front_frame_at_each_read_at_most_one_a_front_frame_ms() -> None:
    """functions/front.py's beats: a frame at each read of the batchers, no two less than
    FRONT_FRAME_MS apart; fixed frames: one a FRONT_FRAME_MS."""
    assert front_frames_per_s(1, 0.2, 0.02, "beats", phased=True) == pytest.approx(5)
    assert front_frames_per_s(6, 0.2, 0.02, "beats", phased=False) == pytest.approx(5)  # shared
    assert front_frames_per_s(2, 0.2, 0.02, "beats", phased=True) == pytest.approx(10)
    assert front_frames_per_s(6, 0.2, 0.02, "beats", phased=True) == pytest.approx(30)
    assert front_frames_per_s(10, 0.2, 0.02, "beats", phased=True) == pytest.approx(50)
    assert front_frames_per_s(29, 0.2, 0.02, "beats", phased=True) == pytest.approx(29 / 0.6)
    assert front_frames_per_s(30, 0.2, 0.02, "beats", phased=True) == pytest.approx(50)
    assert front_frames_per_s(4, 0.2, 0.02, "fixed", phased=True) == pytest.approx(50)


def test_second_chances_come_only_where_the_next_frame_is_two_front_frames_away() -> None:
    """On shared beats (a read every 200 ms, frames at most one a 20 ms) a second chance follows
    each frame; with reads closer than two FRONT_FRAME_MS (phased beats of many shards) and
    with fixed or auto frames, none."""
    assert second_chances(5, 0.02, "beats") == 5
    assert second_chances(1 / 0.021, 0.02, "beats") == 0  # the plan's 29 phased shards
    assert second_chances(50, 0.02, "fixed") == second_chances(50, 0.02, "auto") == 0
