"""The yardstick's pieces that need no timing: the bare app it measures against, wrk's summary
read, and the ratios, table and record it makes of recorded samples."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import astuple
from typing import Any

import pytest

from bench import trivial, wrk
from bench.errors import BenchError
from bench.yardstick import Sample, Spread, drive, record, summary, table


def sample(
    round_: int, connections: int, app: str, rate: int, service_us: float, pg_us: float
) -> Sample:
    """A drive of 1 s that answered `rate` requests, with CPU per request as given."""
    return Sample(round_, connections, app, rate, 1.0, service_us * rate / 1e6, pg_us * rate / 1e6)


SAMPLES = [
    sample(1, 64, "bare", 50_000, 20.0, 0.0),
    sample(1, 64, "next", 20_000, 50.0, 10.0),
    sample(2, 64, "next", 15_000, 60.0, 12.0),
    sample(2, 64, "bare", 40_000, 25.0, 0.5),
    sample(3, 64, "bare", 45_000, 20.0, 0.0),
    sample(3, 64, "next", 18_000, 40.0, 10.0),
    sample(1, 1024, "bare", 50_000, 20.0, 0.0),
    sample(1, 1024, "next", 25_000, 30.0, 2.0),
    sample(2, 1024, "bare", 50_000, 20.0, 0.0),  # its /next never ran: not a round
]


def test_the_ratios_are_next_over_bare_per_round_with_median_and_range() -> None:
    found = summary(SAMPLES)
    assert list(found) == [64, 1024]
    at64 = found[64]
    assert at64["rounds"] == 3
    # rounds: service 2.5, 2.4, 2.0; service + Postgres over the bare app's service alone
    # 3.0, 2.88, 2.5; rate 0.4, 0.375, 0.4
    assert at64["ratios"]["service"] == Spread(2.4, 2.0, 2.5)
    assert at64["ratios"]["total"] == pytest.approx(Spread(2.88, 2.5, 3.0))
    assert at64["ratios"]["rate"] == Spread(0.4, 0.375, 0.4)
    assert at64["next"]["rate"] == Spread(18_000, 15_000, 20_000)
    assert at64["bare"]["postgres_us"].high == pytest.approx(0.5)
    assert found[1024]["rounds"] == 1
    assert found[1024]["ratios"]["total"] == pytest.approx(Spread(1.6, 1.6, 1.6))


def test_the_table_prints_each_ratio_and_each_apps_figures() -> None:
    shown = table(summary(SAMPLES)).splitlines()
    assert shown[0] == "/next ÷ bare, median (range) over rounds"
    assert shown[1].split()[:4] == ["conns", "rounds", "service", "µs/request"]
    row = ["64", "3", "2.40", "(2.00-2.50)", "2.88", "(2.50-3.00)", "0.40", "(0.38-0.40)"]
    assert shown[2].split() == row
    assert "1024      1  1.50 (1.50-1.50)" in shown[3]
    assert any(line.split()[:3] == ["64", "next", "18,000"] for line in shown)


def test_the_record_holds_every_sample_and_the_summary_as_json() -> None:
    made = json.loads(json.dumps(record(SAMPLES, {"rounds": 3})))
    assert made["kind"] == "yardstick"
    assert len(made["samples"]) == len(SAMPLES)
    assert made["samples"][1]["service_us"] == pytest.approx(50.0)
    assert made["summary"]["64"]["ratios"]["rate"] == {"median": 0.4, "low": 0.375, "high": 0.4}
    assert made["summary"]["1024"]["rounds"] == 1


def test_a_drive_takes_wrk_s_count_of_answered_requests() -> None:
    asked = []

    def load(url: str, connections: int, duration: float, threads: int) -> wrk.Done:
        asked.append((url, connections, duration, threads))
        return wrk.Done(9_000, 2.0, 4_500.0)

    args = argparse.Namespace(duration=2.0, threads=1)
    got = drive(4, 64, "next", "http://x", [], [], args, load)
    assert asked == [("http://x/counters/hot/next", 64, 2.0, 1)]
    assert (got.round, got.app, got.requests, got.rate) == (4, "next", 9_000, 4_500.0)
    assert got.service == got.postgres == 0.0  # no processes given


def test_wrk_s_summary_is_read_in_any_unit_and_refused_when_absent() -> None:
    out = """Running 5s test @ http://127.0.0.1:1/
  1 threads and 64 connections
  250123 requests in 5.00s, 30.1MB read
Requests/sec:  50024.60
"""
    assert wrk.parse(out) == wrk.Done(250123, 5.0, 50024.60)
    assert wrk.parse(out.replace("5.00s", "1.00m")).seconds == 60.0
    with pytest.raises(BenchError):
        wrk.parse("nothing here")


def test_the_bare_app_answers_200_and_its_body_through_an_asgi_call() -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": []}
    asyncio.run(trivial.app(scope, receive, send))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert dict(sent[0]["headers"])[b"content-type"] == b"application/json"
    assert sent[1] == {"type": "http.response.body", "body": b'{"ok":true}'}
    assert int(dict(sent[0]["headers"])[b"content-length"]) == len(sent[1]["body"])


def with_third(app: str, *rounds: tuple[int, float, float]) -> list[Sample]:
    """SAMPLES' three rounds at 64 connections, and a third app's drive in each: (rate,
    service µs, Postgres µs) a round."""
    return [*SAMPLES[:6], *(sample(r, 64, app, *row) for r, row in enumerate(rounds, 1))]


def test_against_another_commit_its_next_divides_this_ones() -> None:
    made = with_third("before", (10_000, 100.0, 20.0), (12_000, 60.0, 12.0), (20_000, 50.0, 10.0))
    found = summary(made)
    # rounds: service 0.5, 1.0, 0.8; service + Postgres 0.5, 1.0, 0.8; rate 2.0, 1.25, 0.9
    assert astuple(found[64]["against"]["service"]) == pytest.approx((0.8, 0.5, 1.0))
    assert astuple(found[64]["against"]["rate"]) == pytest.approx((1.25, 0.9, 2.0))
    assert found[64]["ratios"]["service"] == Spread(2.4, 2.0, 2.5)  # still over the bare app
    assert "against" not in summary(SAMPLES)[64]  # no drive of another commit
    shown = table(found)
    assert "/next ÷ the other commit's /next (--against)" in shown
    assert shown.splitlines()[-1].split()[:4] == ["64", "3", "0.80", "(0.50-1.00)"]
    kept = json.loads(json.dumps(record(made, {})))["summary"]["64"]["against"]
    assert kept["rate"]["high"] == pytest.approx(2.0)


def test_the_floor_app_answers_a_frames_requests_each_the_next_number() -> None:
    """/batched: requests that came within one turn of the loop share one frame, and each
    gets its own number, in the order they came."""
    sent: dict[int, list[dict[str, Any]]] = {}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def one(i: int) -> None:
        async def send(message: dict[str, Any]) -> None:
            sent.setdefault(i, []).append(message)

        scope = {"type": "http", "method": "POST", "path": "/batched", "headers": []}
        await trivial.app(scope, receive, send)

    async def run() -> None:
        trivial.FRAME.last = 0
        await asyncio.gather(*(one(i) for i in range(3)))
        await one(3)  # a frame of its own, after the first closed

    asyncio.run(run())
    bodies = [json.loads(sent[i][1]["body"]) for i in range(4)]
    assert bodies == [{"counter": "hot", "value": v} for v in (1, 2, 3, 4)]
    assert sent[0][0]["status"] == 200


def test_with_the_floor_next_and_the_floor_are_each_held_against_what_lies_under() -> None:
    made = with_third("floor", (40_000, 25.0, 0.0), (30_000, 30.0, 0.0), (36_000, 40.0, 0.0))
    found = summary(made)
    # floor ÷ bare, service: 1.25, 1.2, 2.0; /next ÷ floor, service: 2.0, 2.0, 1.0
    assert astuple(found[64]["floor_over_bare"]["service"]) == pytest.approx((1.25, 1.2, 2.0))
    assert astuple(found[64]["over_floor"]["service"]) == pytest.approx((2.0, 1.0, 2.0))
    assert astuple(found[64]["over_floor"]["rate"]) == pytest.approx((0.5, 0.5, 0.5))
    assert found[64]["floor"]["rate"] == Spread(36_000, 30_000, 40_000)
    assert "floor_over_bare" not in summary(SAMPLES)[64]
    shown = table(found)
    assert "floor (/batched) ÷ bare (--floor), median (range) over rounds" in shown
    assert any(line.split()[:3] == ["64", "floor", "36,000"] for line in shown.splitlines())
    kept = json.loads(json.dumps(record(made, {})))["summary"]["64"]
    assert kept["over_floor"]["service"]["median"] == pytest.approx(2.0)


def test_gcpause_reads_wrk_s_latency_distribution() -> None:
    from bench.gcpause import latency

    out = """  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     6.10ms    3.20ms  46.70ms   90.00%
  Latency Distribution
     50%    5.54ms
     75%    7.00ms
     90%    9.00ms
     99%  550.00us
  41000 requests in 8.00s, 6.00MB read
Requests/sec:   5125.00
"""
    assert latency(out) == {"rps": 5125.0, "p50": 5.54, "p99": 0.55, "max": 46.7}
