"""The hops of a run's requests on the AWS path, from the service's `numerator_hop_seconds`
histograms (infra/observe/metrics.py): how many, the mean and the p95 of each, over the run.

An edge's hops are counted once a request: `front` (waiting in its front frame: the server
edge), `put` and `reply` (from the put's return to the reply in hand). A batcher's once a
record: `stream` (from the stream's arrival stamp to the read's return: the shard's beat and the
GetRecords), `frame` (the read to its frame's commit), `commit`, `publish` (the commit to the
replies written; a server edge's push goes before it). numerator's own waits are `front`,
`stream` less the GetRecords's time, and `frame`: docs/performance.md, "Each hop of a request".
"""

from __future__ import annotations

import math
from typing import Any

HOP = "numerator_hop_seconds"
ORDER = ("front", "put", "stream", "frame", "commit", "publish", "reply")


def scraped(metrics: dict[str, float]) -> dict[str, float]:
    """A scrape's hop histograms as plain totals: `hop:front:sum`, `hop:front:count` and
    `hop:front:le:0.05` (cumulative, as the exposition writes them)."""
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if not name.startswith(HOP):
            continue
        rest, _, labels = name[len(HOP) :].partition("{")
        pairs = dict(part.split("=", 1) for part in labels.rstrip("}").split(",") if "=" in part)
        hop = pairs.get("hop", "").strip('"')
        if not hop:
            continue
        if rest == "_sum":
            out[f"hop:{hop}:sum"] = value
        elif rest == "_count":
            out[f"hop:{hop}:count"] = value
        elif rest == "_bucket" and "le" in pairs:
            out[f"hop:{hop}:le:{pairs['le'].strip(chr(34))}"] = value
    return out


def summary(totals: dict[str, float]) -> dict[str, dict[str, float]]:
    """Each hop seen in a run's totals (last scrape less first): its count, mean and p95 (ms,
    the p95 within its bucket as Prometheus's histogram_quantile reads it)."""
    out: dict[str, dict[str, float]] = {}
    for hop in sorted({k.split(":")[1] for k in totals if k.startswith("hop:")}, key=_rank):
        count = totals.get(f"hop:{hop}:count", 0.0)
        if count <= 0:
            continue
        bounds = sorted(
            (float(k.rsplit(":", 1)[1]), v)
            for k, v in totals.items()
            if k.startswith(f"hop:{hop}:le:")
        )
        out[hop] = {
            "count": count,
            "mean_ms": round(totals.get(f"hop:{hop}:sum", 0.0) / count * 1000, 2),
            "p95_ms": round(quantile(0.95, bounds) * 1000, 2),
        }
    return out


def quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """The q-quantile of cumulative buckets [(upper bound, count at or below)], linear within
    its bucket; the last finite bound where it falls in +Inf's."""
    if not buckets or buckets[-1][1] <= 0:
        return 0.0
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower
            share = (rank - below) / (count - below) if count > below else 1.0
            return lower + (bound - lower) * share
        lower, below = bound, count
    return lower


def line(hops: dict[str, Any]) -> str:
    """One run's hops as the bench prints them ("" when it has none)."""
    parts = ", ".join(
        f"{hop} {one['mean_ms']:.1f}/{one['p95_ms']:.0f}" for hop, one in hops.items()
    )
    return f"  hops, mean/p95 ms: {parts}" if hops else ""


def _rank(hop: str) -> int:
    return ORDER.index(hop) if hop in ORDER else len(ORDER)
