"""Latency histograms (HDR, microseconds): one for the whole run and one per second."""

from __future__ import annotations

from collections.abc import Iterable

from hdrh.histogram import HdrHistogram

LOWEST_US, HIGHEST_US, DIGITS = 1, 120_000_000, 2
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


def new() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)


def record(histogram: HdrHistogram, seconds: float) -> None:
    histogram.record_value(min(HIGHEST_US, max(LOWEST_US, round(seconds * 1e6))))


def merge(histograms: Iterable[HdrHistogram]) -> HdrHistogram:
    total = new()
    for histogram in histograms:
        total.add(histogram)
    return total


def summary(histogram: HdrHistogram) -> dict[str, float]:
    """Milliseconds: p50, p90, p95, p99, p99.9, max and mean (0 for an empty histogram)."""
    if histogram.get_total_count() == 0:
        return {**{_name(p): 0.0 for p in PERCENTILES}, "max": 0.0, "mean": 0.0}
    out = {_name(p): histogram.get_value_at_percentile(p) / 1000 for p in PERCENTILES}
    out["max"] = histogram.get_max_value() / 1000
    out["mean"] = histogram.get_mean_value() / 1000
    return out


def distribution(histogram: HdrHistogram) -> list[tuple[float, float]]:
    """(percentile, ms) points for a latency-by-percentile chart."""
    if histogram.get_total_count() == 0:
        return []
    points = [0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 100.0]
    return [(p, histogram.get_value_at_percentile(p) / 1000) for p in points]


def encode(histogram: HdrHistogram) -> str:
    raw = histogram.encode()
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def decode(text: str) -> HdrHistogram:
    return HdrHistogram.decode(text.encode())


def _name(percentile: float) -> str:
    return "p" + f"{percentile:g}".replace(".", "")
