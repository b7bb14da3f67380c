"""`numerator bench` end to end, as written in the issue: every output exists and agrees with
the server's own counters; --compare runs the baselines; `bench report` rebuilds the HTML."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.slow


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "numerator", "bench", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_local_run_leaves_a_record_that_agrees_with_the_server(
    tmp_path: Path, database_url: str
) -> None:
    out = {k: tmp_path / f"run.{k}" for k in ("json", "csv", "html")}
    done = bench(
        "--local",
        "--schedule",
        "const(60,3s)",
        "--description",
        "e2e",
        "--json",
        str(out["json"]),
        "--csv",
        str(out["csv"]),
        "--html",
        str(out["html"]),
        "--db",
        database_url,
    )
    assert "achieved" in done.stderr, "a progress line while it runs"
    run = json.loads(out["json"].read_text())
    summary, service = run["summary"], run["service"]["totals"]
    assert summary["requests"] == 180 and summary["ok"] == 180
    assert summary["bad_responses"] == 0 and summary["errors"] == 0
    # the client's count agrees with the server's own counters, scraped from /metrics
    assert service["requests"] == summary["ok"]
    assert service["records_in"] == service["records_out"] == summary["ok"]
    assert service["values"] == summary["ok"]
    assert 1 <= summary["requests_per_txn"] <= 180
    assert summary["cpu_pct"] is not None and summary["rss_mb"] > 0
    assert run["client"]["per_second"] and run["service"]["per_second"]
    assert 0 < summary["latency_p50_ms"] <= summary["latency_p99_ms"] <= summary["latency_max_ms"]
    with out["csv"].open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows[-1]["run_id"] == summary["run_id"]
    assert float(rows[-1]["rps_mean"]) == summary["rps_mean"]
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT description, rps_mean, latency_p95_ms FROM bench_runs WHERE run_id = %s",
            (summary["run_id"],),
        ).fetchone()
    assert row == ("e2e", summary["rps_mean"], summary["latency_p95_ms"])
    html = out["html"].read_text()
    assert summary["run_id"] in html and html.count("<svg") >= 5

    rebuilt = tmp_path / "rebuilt.html"
    bench("report", "--db", database_url, "--html", str(rebuilt))
    assert summary["run_id"] in rebuilt.read_text()


def test_compare_runs_the_baselines_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    html = tmp_path / "cmp.html"
    done = bench(
        "--local",
        "--compare",
        "--quiet",
        "--settings",
        "FRAME_POLICY=fixed",
        "--schedule",
        "const(300,2s)",
        "--json",
        str(out),
        "--html",
        str(html),
    )
    runs = json.loads(out.read_text())["runs"]
    assert [r["summary"]["target"] for r in runs] == [
        "numerator[FRAME_POLICY=fixed]",
        "baseline-rowlock",
        "baseline-sequence",
    ]
    for run in runs:
        assert run["summary"]["ok"] == 600, run["summary"]
    # a baseline pays one transaction per request; numerator shares them (with fixed 10 ms
    # frames here: group commit at this light load commits about as often as requests come)
    assert runs[1]["service"]["totals"]["transactions"] == 600
    assert runs[0]["service"]["totals"]["transactions"] < 300
    assert "Ratios, measured side by side" in html.read_text()
    assert "baseline-rowlock" in done.stdout


def test_settings_run_numerator_once_per_configuration_and_sweep_steps(tmp_path: Path) -> None:
    out, html = tmp_path / "sweep.json", tmp_path / "sweep.html"
    done = bench(
        "--local",
        "--quiet",
        "--floor",
        "--settings",
        "FRAME_POLICY=fixed,BACK_FRAME_MS=20",
        "--settings",
        "FRAME_POLICY=auto",
        "--schedule",
        "const(50,3s) const(400,3s)",
        "--json",
        str(out),
        "--html",
        str(html),
    )
    runs = json.loads(out.read_text())["runs"]
    names = [r["summary"]["target"] for r in runs]
    assert names == [
        "numerator[FRAME_POLICY=fixed,BACK_FRAME_MS=20]",
        "numerator[FRAME_POLICY=auto]",
        "floor (/ping)",
    ]
    *runs, floor = runs
    # the floor: the same schedule on the trivial route of numerator as the first --settings
    # configures it; no number is taken, so no frame commits
    assert floor["summary"]["ok"] == 150 + 1200, floor["summary"]
    assert floor["settings"]["environment"]["BACK_FRAME_MS"] == "20"
    assert [s["offered_rps"] for s in floor["steps"]] == [50, 400]
    assert all(not step["transactions_per_s"] for step in floor["steps"]), floor["steps"]
    assert floor["service"]["totals"].get("requests", 0) == 0  # /next was never called
    for run in runs:
        assert run["summary"]["ok"] == 150 + 1200, run["summary"]
        assert [s["offered_rps"] for s in run["steps"]] == [50, 400]
        for step in run["steps"]:
            assert 0 < step["latency_p50_ms"] <= step["latency_p99_ms"]
            assert step["transactions_per_s"] is not None and step["transactions_per_s"] > 0
    fixed, auto = runs
    assert fixed["settings"]["environment"]["BACK_FRAME_MS"] == "20"
    assert fixed["settings"]["back_frame_ms"] == 20.0
    # fixed 20 ms frames commit at most about 50 times a second; group commit at 400 rps more
    assert fixed["steps"][1]["transactions_per_s"] < 70 < auto["steps"][1]["transactions_per_s"]
    page = html.read_text()
    assert "Steps" in page and all(name in page for name in names)
    assert "steps: p50 / p99 ms" in done.stdout


def refused(*args: str) -> str:
    """`numerator bench ARGS`, which must exit 2; what it said on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "numerator", "bench", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    return done.stderr


def test_aws_modes_report_the_calls_per_request_beside_the_embedded_path(tmp_path: Path) -> None:
    out, html = tmp_path / "aws.json", tmp_path / "aws.html"
    done = bench(
        "--aws",
        "moto",
        "--edge",
        "server",
        "--compare",
        "--quiet",
        "--schedule",
        "const(100,3s)",
        "--json",
        str(out),
        "--html",
        str(html),
    )
    server, embedded, atomic = json.loads(out.read_text())["runs"]
    assert server["summary"]["target"] == "numerator-aws-server"
    # the serverless counter a user would write instead: one UpdateItem ADD per request
    assert atomic["summary"]["target"] == "baseline-atomic", atomic["summary"]
    assert atomic["summary"]["ok"] == 300 and atomic["summary"]["requests_per_txn"] == 1.0
    made = {k: v for k, v in atomic["service"]["totals"].items() if k.startswith("aws:") and v}
    assert made == {"aws:update_item": 300.0}, made
    assert "baseline-atomic: 1.000 AWS calls per request (update_item 1.000)" in done.stdout
    assert embedded["summary"]["target"] == "numerator-embedded"
    assert server["summary"]["mode"] == "aws-server" and embedded["summary"]["mode"] == "embedded"
    for run in (server, embedded):
        assert run["summary"]["ok"] == 300, run["summary"]
    totals = server["service"]["totals"]
    # the edge's and the batcher's counters together: what the edge put, the batcher read
    assert totals["requests"] == 300 and totals["values"] == 300
    assert totals["records_in"] == totals["records_put"] < 300, "front frames share records"
    calls = {k: v for k, v in totals.items() if k.startswith("aws:")}
    # the batcher writes a frame's replies for the server edge as an item (REPLY_ITEMS=frame),
    # and pushes them to it (REPLY_PUSH): the edge reads the table (a Query, never by key) only
    # for what a push did not answer first, on a starved machine a few
    assert {"aws:get_records", "aws:batch_write_item"} <= set(calls), calls
    assert "aws:batch_get_item" not in calls, calls
    assert totals["replies_pushed"] >= totals["records_put"] / 2, totals
    assert calls.get("aws:put_record", 0) + calls.get("aws:put_records", 0) > 0, calls
    assert server["summary"]["aws_calls_per_request"] == round(sum(calls.values()) / 300, 3)
    assert embedded["summary"]["aws_calls_per_request"] is None
    assert "AWS calls per request" in done.stdout
    assert "AWS calls (what AWS bills)" in html.read_text()

    lam = tmp_path / "lambda.json"
    bench(
        "--aws",
        "moto",
        "--edge",
        "lambda",
        "--quiet",
        "--schedule",
        "const(10,2s)",
        "--json",
        str(lam),
    )
    run = json.loads(lam.read_text())
    assert run["summary"]["ok"] == 20 and run["summary"]["target"] == "numerator-aws-lambda"
    assert run["service"]["totals"]["records_in"] == 20, "Lambda puts one record per request"


def test_bad_options_are_refused_clearly() -> None:
    assert "const() takes 2 arguments" in refused("--local", "--schedule", "const(10)")
    assert "--url" in refused("--schedule", "const(1,1s)")
    assert "--edge server (front frames) or lambda" in refused(
        "--aws", "moto", "--edge", "embedded"
    )
    assert "add --aws moto" in refused("--local", "--edge", "lambda")
    said = refused("--local", "--settings", "FRAME_POLICY=x")
    assert "FRAME_POLICY: must be one of fixed, auto" in said
