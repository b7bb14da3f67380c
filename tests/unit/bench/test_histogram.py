from __future__ import annotations

import random

from bench import histogram


def test_merging_per_second_histograms_gives_the_overall_one() -> None:
    rng = random.Random(3)
    seconds = [histogram.new() for _ in range(5)]
    overall = histogram.new()
    for _ in range(5000):
        value = rng.expovariate(1 / 0.02)
        histogram.record(rng.choice(seconds), value)
        histogram.record(overall, value)
    merged = histogram.merge(seconds)
    assert merged.get_total_count() == 5000
    assert histogram.summary(merged) == histogram.summary(overall)


def test_summary_in_milliseconds() -> None:
    h = histogram.new()
    for ms in range(1, 101):
        histogram.record(h, ms / 1000)
    s = histogram.summary(h)
    assert 49 <= s["p50"] <= 51
    assert 98 <= s["p99"] <= 100.5
    assert 99.5 <= s["max"] <= 101
    assert histogram.summary(histogram.new())["p99"] == 0


def test_encoding_round_trips() -> None:
    h = histogram.new()
    for v in (0.001, 0.01, 0.5):
        histogram.record(h, v)
    again = histogram.decode(histogram.encode(h))
    assert histogram.summary(again) == histogram.summary(h)
