"""The service side of a run on the AWS path: the edge's and the batchers' scrapes added up, AWS
calls by call, gauges kept as levels (not turned into rates)."""

from __future__ import annotations

from bench.collect import Collector, combined, totals
from bench.scrape import parse

EDGE = """
numerator_next_requests_total 100
numerator_records_put_total 20
numerator_aws_calls_total{call="put_record"} 20
numerator_aws_calls_total{call="batch_get_item"} 12
numerator_aws_call_seconds_total{call="put_record"} 0.4
numerator_frame_size_records_sum 0
numerator_frame_size_records_count 0
"""
BATCHER = """
numerator_records_in_total 20
numerator_aws_calls_total{call="get_records"} 7
numerator_aws_throttles_total{call="get_records"} 2
numerator_lease_takeovers_total 1
numerator_leases_held 2
numerator_batcher_lag_seconds 0.5
numerator_frame_size_records_sum 20
numerator_frame_size_records_count 4
"""


def scrape(text: str) -> dict[str, float]:
    metrics = parse(text)
    out = totals(metrics)
    out["lag"] = metrics.get("numerator_batcher_lag_seconds", 0.0)
    out["leases"] = metrics.get("numerator_leases_held", 0.0)
    return out


def test_the_edge_and_its_batchers_add_up_to_one_service() -> None:
    one = combined([scrape(EDGE), scrape(BATCHER), scrape(BATCHER)])
    assert one["requests"] == 100 and one["records_put"] == 20 and one["records_in"] == 40
    assert one["aws:put_record"] == 20 and one["aws:get_records"] == 14
    assert one["aws_s:put_record"] == 0.4  # 20 ms a put, as seen by the edge
    assert one["throttles"] == 4 and one["takeovers"] == 2
    assert one["leases"] == 4, "two batchers holding two shards each"
    assert one["lag"] == 0.5, "the worst lag, not a sum"


def test_gauges_stay_levels_in_the_per_second_samples() -> None:
    collector = Collector("http://n")
    before = combined([scrape(EDGE), scrape(BATCHER)])
    after = dict(before, requests=300.0, leases=3.0, lag=1.5)
    sample = collector._delta(10.0, 2.0, before, after)
    assert sample["requests"] == 100.0  # (300 - 100) / 2 s
    assert sample["leases"] == 3.0 and sample["lag_s"] == 1.5


def test_a_runs_hops_are_read_from_the_rendered_histograms_as_prometheus_reads_them() -> None:
    """Each hop's count, mean and p95 over a run: the histograms the edge and a batcher render
    (infra/observe/metrics.py), added up, first scrape taken from the last; the p95 within its
    bucket, linearly, as histogram_quantile reads it."""
    from bench.hops import line, quantile, summary
    from infra.observe.metrics import Metrics

    edge, batcher, first = Metrics(), Metrics(), Metrics()
    first.hop_seconds.observe("front", 0.004)
    edge.hop_seconds.add(first.hop_seconds)
    for wait in range(1, 101):  # 1 to 100 ms, once each
        edge.hop_seconds.observe("front", wait / 1000)
    edge.hop_seconds.observe("put", 0.003, times=50)  # a frame's put, for 50 requests
    batcher.hop_seconds.observe("stream", 0.02)
    before = scrape(first.render())
    after = combined([scrape(edge.render()), scrape(batcher.render())])
    run = summary({k: after[k] - before.get(k, 0.0) for k in after if k.startswith("hop:")})
    assert list(run) == ["front", "put", "stream"], "in the order a request meets them"
    assert run["front"]["count"] == 100 and run["front"]["mean_ms"] == 50.5
    # 95 of 100 at or below 95 ms: in the (50, 100] ms bucket, 45 of its 50, so 95 ms
    assert run["front"]["p95_ms"] == 95.0
    assert run["put"] == {"count": 50, "mean_ms": 3.0, "p95_ms": 4.88}  # (2.5, 5] ms: 95 %
    assert quantile(0.5, [(0.01, 0.0), (float("inf"), 4.0)]) == 0.01, "past the last bound"
    assert line(run).startswith("  hops, mean/p95 ms: front 50.5/95, put 3.0/5")
    text = edge.render()
    assert text.count("# TYPE numerator_hop_seconds histogram") == 1
    assert 'numerator_hop_seconds_sum{hop="put"} 0.15' in text
    again = Metrics.from_state(edge.state())
    assert again.render() == text, "its state travels as JSON (Lambda containers, workers)"
