"""The bench's record writers (JSON, CSV, a real Postgres) and the report builder."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench import histogram, record, report
from bench.load import Result, Second


def fake_run(run_id: str, target: str = "numerator", rps: int = 100) -> dict[str, Any]:
    result = Result(
        seconds=2.0,
        offered=2 * rps,
        sent=2 * rps,
        ok=2 * rps - 1,
        statuses=Counter({200: 2 * rps - 1, 503: 1}),
    )
    for at in range(2):
        second = Second(offered=rps, sent=rps, ok=rps - at)
        for i in range(rps):
            histogram.record(second.latency, 0.001 * (i % 20 + 1))
        result.per_second[at] = second
    service = {
        "requests": 2 * rps,
        "transactions": 20,
        "requests_per_txn": rps / 10,
        "records_in": 2 * rps,
        "records_out": 2 * rps,
        "cpu_pct": 50.0,
        "rss_mb": 100.0,
        "frame_size_mean": 10.0,
        "lag_max_s": 0.01,
        "dead_letters": 0,
    }
    samples = [
        {
            "t": 1.0,
            "records_in": rps,
            "records_out": rps,
            "transactions": 10,
            "frame_size_mean": 10.0,
            "cpu_pct": 50.0,
            "rss_mb": 100.0,
        }
    ]
    scenario = {
        "schedule": f"const({rps}, 2s)",
        "connections": 8,
        "counters": 1,
        "mix": "hot",
        "count": 1,
        "idempotency_share": 0.0,
        "description": "unit",
    }
    return record.build(
        run_id=run_id,
        started_at="2026-11-29T12:00:00+00:00",
        description="unit",
        target=target,
        mode="embedded",
        scenario=scenario,
        settings={"workers": 1, "back_frame_ms": 10.0},
        result=result,
        service=service,
        service_seconds=samples,
        version="test",
    )


def test_summary_has_plain_columns_with_measured_values() -> None:
    run = fake_run("r1")
    summary = run["summary"]
    assert list(summary) == list(record.COLUMNS)
    assert summary["rps_mean"] == pytest.approx(199 / 2)
    assert summary["bad_responses"] == 1
    assert 9 <= summary["latency_p50_ms"] <= 11.5
    assert summary["requests_per_txn"] == 10


def test_json_and_csv_round_trip(tmp_path: Path) -> None:
    runs = [fake_run("a"), fake_run("a", "baseline-rowlock", 50)]
    record.write_json(tmp_path / "run.json", runs)
    assert record.read_json(tmp_path / "run.json") == [
        {
            **r,
            "client": {
                **r["client"],
                "distribution": [list(p) for p in r["client"]["distribution"]],
            },
        }
        for r in runs
    ]
    csv_path = tmp_path / "runs.csv"
    record.append_csv(csv_path, runs[:1])
    record.append_csv(csv_path, runs[1:])
    rows = record.read_csv(csv_path)
    assert [r["target"] for r in rows] == ["numerator", "baseline-rowlock"]
    assert float(rows[1]["rps_mean"]) == runs[1]["summary"]["rps_mean"]
    (tmp_path / "other.csv").write_text("x,y\n1,2\n")
    with pytest.raises(ValueError, match="other columns"):
        record.append_csv(tmp_path / "other.csv", runs)


def test_postgres_rows_are_plain_columns_plus_jsonb(database_url: str, name: str) -> None:
    runs = [fake_run(name), fake_run(name, "baseline-sequence", 70)]
    record.insert_db(database_url, runs)
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT target, rps_mean, latency_p95_ms, run->'summary'->>'run_id'"
            " FROM bench_runs WHERE run_id = %s ORDER BY target",
            (name,),
        ).fetchall()
    assert [r[0] for r in rows] == ["baseline-sequence", "numerator"]
    assert rows[1][1] == runs[0]["summary"]["rps_mean"]
    assert rows[0][3] == name
    history, latest = record.read_db(database_url)
    assert any(h["run_id"] == name for h in history)
    assert latest and latest[0]["summary"]["run_id"] == history[0]["run_id"]


def test_report_is_self_contained_with_charts_ratios_and_history() -> None:
    runs = [fake_run("now"), fake_run("now", "baseline-rowlock", 50)]
    history = [runs[0]["summary"], fake_run("before")["summary"]]
    html = report.build(runs, history)
    assert html.count("<svg") >= 1 + 4 * len(runs)
    assert "Ratios, measured side by side" in html
    assert "Compared with earlier runs" in html and "before" in html
    assert html.count("class='verdict'") == len(runs)  # each run's verdict, with its evidence
    assert "<b>baseline-rowlock: no tier saturated</b><ul><li>the offered rate was below " in html
    assert 'class="current"' in html
    assert "<script" not in html and "http://" not in html.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
