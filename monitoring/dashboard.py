"""numerator's Grafana dashboard, as code (grafanalib): `python -m monitoring.dashboard` writes
monitoring/dashboard.json, which is committed beside this file and imported into Grafana.

One screen, top to bottom: the SLOs, requests (rate, errors, latency: RED), the stream (in
against out, lag), frames and Postgres, AWS calls and throttles, leases, CPU and memory per role,
and the ledger's voids. tests/e2e/test_dashboard.py checks that every metric a query names is
exported by a running numerator, so that the dashboard cannot drift from the code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grafanalib._gen import DashboardEncoder
from grafanalib.core import (
    Dashboard,
    GridPos,
    Panel,
    RowPanel,
    Stat,
    Target,
    Template,
    Templating,
    TimeSeries,
)

OUT = Path(__file__).with_name("dashboard.json")
DATASOURCE = "${datasource}"
WIDTH, HEIGHT = 8, 8


def query(expr: str, legend: str = "") -> Target:
    return Target(expr=expr, legendFormat=legend, refId="A", datasource=DATASOURCE)


def rate_of(metric: str, legend: str) -> Target:
    """The per-second rate of a counter, summed over every process."""
    return query(f"sum(rate({metric}{RATE}))", legend)


def grown(metric: str, legend: str) -> Target:
    """How much a counter grew per interval, summed over every process."""
    return query(f"sum(increase({metric}{RATE}))", legend)


def series(title: str, unit: str, *targets: Target, description: str = "") -> TimeSeries:
    refs = [
        Target(expr=t.expr, legendFormat=t.legendFormat, refId=chr(65 + i), datasource=DATASOURCE)
        for i, t in enumerate(targets)
    ]
    return TimeSeries(
        title=title, unit=unit, targets=refs, description=description, dataSource=DATASOURCE
    )


def stat(title: str, unit: str, expr: str, description: str = "") -> Stat:
    return Stat(
        title=title,
        format=unit,
        targets=[query(expr)],
        description=description,
        dataSource=DATASOURCE,
        reduceCalc="lastNotNull",
    )


RATE = "[$__rate_interval]"

ROWS: list[tuple[str, list[Panel]]] = [
    (
        "SLOs: /next available 99.9 %, 99 % within 250 ms (docs/operations.md)",
        [
            stat(
                "Availability, 1 h",
                "percentunit",
                "1 - numerator:next_errors:ratio_rate1h",
                "Share of /next answers that were not 5xx (monitoring/rules.yml records it).",
            ),
            stat(
                "Error budget left, 3 d pace",
                "percentunit",
                "1 - numerator:next_errors:ratio_rate3d / 0.001",
                "1 - (5xx share over 3 days) / (the budget, 0.1 %): below 0, the budget runs out.",
            ),
            stat(
                "Within 250 ms, 1 h",
                "percentunit",
                "1 - numerator:next_slow:ratio_rate1h",
                "Share of /next requests whose values came within 250 ms.",
            ),
        ],
    ),
    (
        "Requests (/next): rate, errors, latency",
        [
            series(
                "Answers by status",
                "reqps",
                query(f"sum by (status) (rate(numerator_responses_total{RATE}))", "{{status}}"),
            ),
            series(
                "Refused before any work",
                "reqps",
                query(
                    f"sum by (status) (rate(numerator_requests_refused_total{RATE}))", "{{status}}"
                ),
                description="401 no key, 403 scope, 429 too many Idempotency-Keys, 431 headers.",
            ),
            series(
                "Reply wait",
                "s",
                *[
                    query(
                        f"histogram_quantile({q}, sum by (le) "
                        f"(rate(numerator_reply_wait_seconds_bucket{RATE})))",
                        f"p{round(q * 100)}",
                    )
                    for q in (0.5, 0.9, 0.99)
                ],
            ),
        ],
    ),
    (
        "Stream: records in against out, lag",
        [
            series(
                "Records put, read, replied",
                "ops",
                rate_of("numerator_records_put_total", "put (edges)"),
                rate_of("numerator_records_in_total", "read (batchers)"),
                rate_of("numerator_records_out_total", "replied (batchers)"),
            ),
            series(
                "Batcher lag",
                "s",
                query("max(numerator_batcher_lag_seconds)", "oldest record of the last frame"),
            ),
            series(
                "Front frames and the in-process stream",
                "short",
                query(
                    f"sum(rate(numerator_front_frame_requests_sum{RATE})) / "
                    f"sum(rate(numerator_front_frame_requests_count{RATE}))",
                    "requests per front-frame record",
                ),
                query("sum(numerator_stream_depth_records)", "records waiting (embedded)"),
            ),
        ],
    ),
    (
        "Frames and Postgres",
        [
            series(
                "Transactions and values",
                "ops",
                rate_of("numerator_frames_committed_total", "frames committed"),
                rate_of("numerator_values_allocated_total", "values allocated"),
                rate_of("numerator_frame_retries_total", "frames retried"),
            ),
            series(
                "Frame size and requests per transaction",
                "short",
                query(
                    f"sum(rate(numerator_frame_size_records_sum{RATE})) / "
                    f"sum(rate(numerator_frame_size_records_count{RATE}))",
                    "records per frame",
                ),
                query(
                    f"sum(rate(numerator_next_requests_total{RATE})) / "
                    f"sum(rate(numerator_frames_committed_total{RATE}))",
                    "/next requests per transaction",
                ),
            ),
            series(
                "Frame commit time",
                "s",
                query(
                    f"histogram_quantile(0.99, sum by (le) "
                    f"(rate(numerator_frame_commit_seconds_bucket{RATE})))",
                    "p99",
                ),
                query(
                    f"histogram_quantile(0.5, sum by (le) "
                    f"(rate(numerator_frame_commit_seconds_bucket{RATE})))",
                    "p50",
                ),
            ),
        ],
    ),
    (
        "AWS: calls, throttles, retries",
        [
            series(
                "Calls by API call",
                "ops",
                query(f"sum by (call) (rate(numerator_aws_calls_total{RATE}))", "{{call}}"),
            ),
            series(
                "Throttles by API call",
                "ops",
                query(f"sum by (call) (rate(numerator_aws_throttles_total{RATE}))", "{{call}}"),
            ),
            series(
                "Retries by reason",
                "ops",
                query(f"sum by (reason) (rate(numerator_aws_retries_total{RATE}))", "{{reason}}"),
            ),
        ],
    ),
    (
        "Batchers: leases, health",
        [
            series(
                "Leases and batchers",
                "short",
                query("sum(numerator_leases_held)", "leases held"),
                query("max(numerator_batchers)", "live batchers"),
            ),
            series(
                "Takeovers and restarts",
                "short",
                grown("numerator_lease_takeovers_total", "lease takeovers"),
                query(
                    f"sum(increase(numerator_shard_restarts_total{RATE}))", "shard loop restarts"
                ),
                query(
                    f"sum(increase(numerator_keys_refresh_errors_total{RATE}))",
                    "key reloads failed",
                ),
            ),
            series(
                "Checks (1 up, 0 down)",
                "short",
                query("min by (check, instance) (numerator_check_up)", "{{check}} {{instance}}"),
            ),
        ],
    ),
    (
        "CPU and memory per role",
        [
            series(
                "CPU",
                "percentunit",
                query(
                    f"sum by (job, instance) (rate(process_cpu_seconds_total{RATE}))",
                    "{{job}} {{instance}}",
                ),
                description="One core is 100 %.",
            ),
            series(
                "Resident memory",
                "bytes",
                query(
                    "sum by (job, instance) (process_resident_memory_bytes)", "{{job}} {{instance}}"
                ),
            ),
            series(
                "Roles",
                "short",
                query("count by (mode, role) (numerator_info)", "{{mode}} {{role}}"),
            ),
        ],
    ),
    (
        "Ledger: values not delivered",
        [
            series(
                "Voided and cancelled",
                "ops",
                query(
                    f"sum(rate(numerator_values_abandoned_total{RATE}))", "values voided, abandoned"
                ),
                query(
                    f"sum(rate(numerator_records_cancelled_total{RATE}))",
                    "records cancelled (no value)",
                ),
                query(
                    f"sum(rate(numerator_records_expired_total{RATE}))",
                    "records expired (no value)",
                ),
            ),
            series(
                "Clients gone, replies abandoned",
                "ops",
                rate_of("numerator_clients_gone_total", "clients gone"),
                rate_of("numerator_replies_abandoned_total", "replies abandoned"),
                query(
                    f"sum(rate(numerator_replies_republished_total{RATE}))", "replies republished"
                ),
            ),
            series(
                "Dead letters and replays",
                "short",
                grown("numerator_dead_letters_total", "dead letters"),
                grown("numerator_records_replayed_total", "records replayed"),
            ),
        ],
    ),
]


def dashboard() -> Dashboard:
    panels: list[Panel] = []
    y = 0
    for title, row in ROWS:
        panels.append(RowPanel(title=title, gridPos=GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        for i, panel in enumerate(row):
            panel.gridPos = GridPos(h=HEIGHT, w=WIDTH, x=i * WIDTH, y=y)
            panels.append(panel)
        y += HEIGHT
    return Dashboard(
        title="numerator",
        uid="numerator",
        description="numerator's service: SLOs, RED, stream, frames, AWS, leases, roles, ledger.",
        tags=["numerator"],
        timezone="utc",
        panels=panels,
        templating=Templating(
            list=[
                Template(
                    name="datasource",
                    label="Prometheus",
                    query="prometheus",
                    type="datasource",
                    default="Prometheus",
                )
            ]
        ),
    ).auto_panel_ids()


def render() -> str:
    return (
        json.dumps(dashboard().to_json_data(), cls=DashboardEncoder, indent=2, sort_keys=True)
        + "\n"
    )


def expressions(document: dict[str, object]) -> list[str]:
    """Every PromQL expression of a dashboard document."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                found.append(node["expr"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    return found


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
