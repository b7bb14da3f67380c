"""The HTML report: self-contained (inline SVG and CSS), viewable with no network."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

from bench import waterfall
from bench.charts import Series, line_chart
from bench.collect import aws_calls
from bench.headroom import headroom
from bench.verdict import verdict

HEADLINE = [
    ("target", "target"),
    ("rps_mean", "achieved rps"),
    ("offered_rps", "offered rps"),
    ("latency_p50_ms", "p50 ms"),
    ("latency_p95_ms", "p95 ms"),
    ("latency_p99_ms", "p99 ms"),
    ("latency_max_ms", "max ms"),
    ("bad_responses", "non-2xx"),
    ("errors", "errors"),
    ("missed_sends", "missed sends"),
    ("requests_per_txn", "requests / txn"),
    ("aws_calls_per_request", "AWS calls / request"),
    ("cpu_pct", "service CPU %"),
    ("rss_mb", "service RSS MB"),
    ("generator_cpu_pct", "generator CPU %"),
]
HISTORY = [
    ("run_id", "run"),
    ("started_at", "started"),
    ("description", "description"),
    ("target", "target"),
    ("schedule", "schedule"),
    ("rps_mean", "rps"),
    ("latency_p95_ms", "p95 ms"),
    ("latency_p99_ms", "p99 ms"),
    ("bad_responses", "non-2xx"),
    ("missed_sends", "missed"),
    ("requests_per_txn", "req/txn"),
    ("cpu_pct", "CPU %"),
]
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1100px; }
table { border-collapse: collapse; margin: 8px 0 20px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
tr.current td { background: #fff8dc; }
.verdict { border-left: 4px solid #b35c00; padding: 2px 10px; margin: 8px 0; }
.verdict ul { margin: 2px 0; }
.meta { color: #555; } h2 { margin-top: 28px; } svg { display: block; margin: 6px 0 14px; }
"""


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float) or (isinstance(value, str) and _is_float(value)):
        number = float(value)
        if math.isnan(number):
            return "-"
        return f"{number:,.0f}" if abs(number) >= 100 else f"{number:,.2f}"
    return escape(str(value))


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return "." in text


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]], mark: str = "") -> str:
    head = "".join(f"<th>{escape(title)}</th>" for _, title in columns)
    body = []
    for row in rows:
        css = ' class="current"' if mark and row.get("run_id") == mark else ""
        body.append(
            f"<tr{css}>" + "".join(f"<td>{cell(row.get(k))}</td>" for k, _ in columns) + "</tr>"
        )
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def ratios(runs: list[dict[str, Any]]) -> str:
    """The first run (numerator, or its first --settings) against each other run of the same
    invocation: the baselines, or numerator under other settings."""
    if len(runs) < 2:
        return ""
    ours = runs[0]["summary"]
    rows = []
    for run in runs[1:]:
        other = run["summary"]
        rps = ours["rps_mean"] / other["rps_mean"] if other["rps_mean"] else math.nan
        p95 = (
            other["latency_p95_ms"] / ours["latency_p95_ms"] if ours["latency_p95_ms"] else math.nan
        )
        txn = (other["transactions"] / ours["transactions"]) if ours["transactions"] else math.nan
        rows.append({"target": other["target"], "rps": rps, "p95": p95, "txn": txn})
    first = escape(ours["target"])
    columns = [
        ("target", f"against {first}"),
        ("rps", "achieved rps: first ÷ this"),
        ("p95", "p95: this ÷ first"),
        ("txn", "Postgres transactions: this ÷ first"),
    ]
    return "<h2>Ratios, measured side by side</h2>" + table(rows, columns)


def sweep(runs: list[dict[str, Any]]) -> str:
    """Each step of a sweep (a constant offered rate), every run side by side."""
    swept = [run for run in runs if run.get("steps")]
    if not swept:
        return ""
    head = "<th rowspan='2'>offered rps</th>" + "".join(
        f"<th colspan='4'>{escape(run['summary']['target'])}</th>" for run in swept
    )
    sub = "".join(
        "<th>p50 ms</th><th>p99 ms</th><th>Postgres txn/s</th><th>achieved rps</th>" for _ in swept
    )
    body = []
    for i, step in enumerate(swept[0]["steps"]):
        cells = [f"<td>{cell(step['offered_rps'])}</td>"]
        for run in swept:
            mine = run["steps"][i] if i < len(run["steps"]) else {}
            cells += [
                f"<td>{cell(mine.get(k))}</td>"
                for k in ("latency_p50_ms", "latency_p99_ms", "transactions_per_s", "achieved_rps")
            ]
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        "<h2>Steps</h2><p class='meta'>each constant offered rate, its first second left out"
        "</p>"
        f"<table><tr>{head}</tr><tr>{sub}</tr>{''.join(body)}</table>"
    )


def run_axis(run: dict[str, Any]) -> tuple[float, float]:
    """The x axis of a run's charts: its seconds, not past its end."""
    return 0.0, float(max(math.ceil(float(run["summary"]["duration_s"]) - 0.5), 1))


def charts(run: dict[str, Any]) -> str:
    run_x = run_axis(run)
    span = int(run_x[1])
    client = [s for s in run["client"]["per_second"] if s["second"] < max(span, 1)]
    service = run["service"]["per_second"]
    rates = _rates(client, service)
    latency: list[Series] = [
        (name, [(s["second"], s["latency_ms"][key]) for s in client if s["ok"]])
        for key, name in (("p50", "p50"), ("p95", "p95"), ("p99", "p99"), ("max", "max"))
    ]
    frame_size: list[Series] = [
        (
            "frame size (mean)",
            [(s["t"], s["frame_size_mean"]) for s in service if s.get("frame_size_mean")],
        )
    ]
    transactions: list[Series] = [
        ("transactions / s", [(s["t"], s.get("transactions", 0)) for s in service])
    ]
    cpu, memory = _resources(service)
    return "".join(
        [
            line_chart(
                "Offered vs achieved rate, records in vs out",
                rates,
                "second",
                "per second",
                x_range=run_x,
            ),
            line_chart(
                "Latency percentiles over time (from scheduled send)",
                latency,
                "second",
                "ms",
                x_range=run_x,
            ),
            "<p class='meta'>Each second's own percentiles. The table's p99 is over the whole "
            "run's requests, and the console's running p99 is the worst second's of the last "
            "5 s: a bad second moves the chart and the console, and the run's p99 by its "
            "share of the requests only.</p>",
            line_chart(
                "Frames: size and transactions",
                frame_size,
                "second",
                "records per frame",
                right=transactions,
                right_label="transactions / s",
                x_range=run_x,
            ),
            line_chart(
                "Service CPU and memory",
                cpu,
                "second",
                "CPU % (100 = one core)",
                right=memory,
                right_label="RSS MB",
                x_range=run_x,
            ),
        ]
    )


def _rates(client: list[dict[str, Any]], service: list[dict[str, Any]]) -> list[Series]:
    rates: list[Series] = [
        ("offered", [(s["second"], s["offered"]) for s in client]),
        ("achieved (2xx)", [(s["second"], s["ok"]) for s in client]),
        ("non-2xx + errors", [(s["second"], s["bad"] + s["errors"]) for s in client]),
    ]
    if any("records_in" in s for s in service):
        rates.append(("records in", [(s["t"], s.get("records_in", 0)) for s in service]))
        rates.append(("records out", [(s["t"], s.get("records_out", 0)) for s in service]))
    return rates


def _resources(service: list[dict[str, Any]]) -> tuple[list[Series], list[Series]]:
    """The service's CPU (per tier too, on the AWS path) and its memory."""
    cpu: list[Series] = [
        ("service CPU %", [(s["t"], s["cpu_pct"]) for s in service if "cpu_pct" in s])
    ]
    tiers = sorted({k for s in service for k in s if k.startswith("cpu_pct:")})
    if len(tiers) > 1:  # the AWS path: whether the edge, the stream, the batcher or Postgres
        cpu += [
            (f"CPU % {k.split(':', 1)[1]}", [(s["t"], s.get(k, 0.0)) for s in service])
            for k in tiers
        ]
    memory: list[Series] = [
        ("service RSS MB", [(s["t"], s["rss_mb"]) for s in service if "rss_mb" in s])
    ]
    return cpu, memory


def counts(found: dict[str, Any]) -> str:
    """Statuses or errors and how many of each, for people: `200: 1,998, 503: 2`."""
    if not found:
        return "none"
    return ", ".join(f"{name}: {count:,}" for name, count in sorted(found.items()))


def hops_of(totals: dict[str, Any]) -> str:
    """The hops a run's requests took (bench/hops.py), as a table; "" for a run without."""
    hops = [{"hop": hop, **one} for hop, one in (totals.get("hops") or {}).items()]
    if not hops:
        return ""
    return (
        "<h3>Each hop of a request (numerator_hop_seconds)</h3><p class='meta'>an edge's "
        "once a request, a batcher's once a record; numerator's own waits are front, stream "
        "less its GetRecords, and frame (docs/performance.md)</p>"
        + table(hops, [(k, k) for k in ("hop", "count", "mean_ms", "p95_ms")])
    )


def aws(run: dict[str, Any]) -> str:
    """The AWS path's bill and its bottlenecks: AWS calls per request by call, and per second
    the stream's lag, takeovers, throttles, republished replies and dead letters."""
    totals = run["service"]["totals"]
    requests = totals.get("requests") or 0
    made = aws_calls(totals)
    if not made or not requests:
        return ""
    seconds = max(float(run["summary"]["duration_s"]), 1e-9)
    rows = [
        {"call": call, "calls": int(v), "per request": v / requests, "per second": v / seconds}
        for call, v in sorted(made.items(), key=lambda item: -item[1])
    ]
    total = sum(made.values())
    rows.append(
        {
            "call": "all",
            "calls": int(total),
            "per request": total / requests,
            "per second": total / seconds,
        }
    )
    columns = [(k, k) for k in ("call", "calls", "per request", "per second")]
    service = run["service"]["per_second"]
    trouble: list[Series] = [
        (name, [(s["t"], s.get(key, 0.0)) for s in service])
        for key, name in (
            ("lag_s", "lag behind the stream (s)"),
            ("leases", "shard leases held"),
            ("takeovers", "lease takeovers / s"),
            ("throttles", "throttled AWS calls / s"),
            ("republished", "republished replies / s"),
            ("dead_letters", "dead letters / s"),
        )
    ]
    calls: list[Series] = [
        (call, [(s["t"], s.get("aws:" + call, 0.0)) for s in service]) for call in sorted(made)
    ]
    return (
        "<h3>AWS calls (what AWS bills)</h3>"
        f"<p class='meta'>{totals.get('records_put', 0) / requests:.3f} records put per request "
        "(front frames put one per counter per frame)</p>"
        + table(rows, columns)
        + hops_of(totals)
        + line_chart(
            "AWS calls per second, by call", calls, "second", "calls / s", x_range=run_axis(run)
        )
        + line_chart(
            "The pipeline: lag, leases, takeovers, throttles, republished replies, dead letters",
            trouble,
            "second",
            "s / count per s",
            x_range=run_axis(run),
        )
    )


def distribution(runs: list[dict[str, Any]]) -> str:
    names = {0.0: "p0", 1.0: "p90", 2.0: "p99", 3.0: "p99.9", 4.0: "p99.99"}
    series: list[Series] = []
    for run in runs:
        points = [
            (min(4.0, -math.log10(max(1e-4, 1 - p / 100))), ms)
            for p, ms in run["client"]["distribution"]
        ]
        series.append((run["summary"]["target"], points))
    return line_chart(
        "Latency distribution (log scale)", series, "percentile", "ms", x_names=names, log_y=True
    )


def hops(run: dict[str, Any]) -> str:
    """One request's hops from the run's trace file (`TRACE_FILE`, `--trace-cost`)."""
    trace = run.get("trace")
    if not trace:
        return ""
    said = (
        f"<p class='meta'>{trace['spans']} trace spans, {trace['requests']} requests traced, "
        f"in <code>{escape(trace['file'])}</code></p>"
    )
    if not trace["hops"]:
        return said + "<p class='meta'>no /next with its batcher's frame in the file</p>"
    drawn = waterfall.svg(trace["hops"], "one /next (the median traced), its hops")
    return f"<h3>One request's hops</h3>{said}{drawn}"


def tracing(runs: list[dict[str, Any]]) -> str:
    """Tracing's cost: each traced run's latency and service CPU a request against the first
    run's (`--trace-cost`: tracing off)."""
    if len(runs) < 2 or not any(run.get("trace") for run in runs[1:]):
        return ""

    def cpu_ms(summary: dict[str, Any]) -> float:
        cpu, rps = summary.get("cpu_pct"), summary.get("rps_mean")
        return cpu * 10 / rps if cpu is not None and rps else math.nan

    first = runs[0]["summary"]
    rows = []
    for run in runs:
        this = run["summary"]
        rows.append(
            {
                "target": this["target"],
                "traced": (run.get("trace") or {}).get("requests", 0),
                "p50": this["latency_p50_ms"],
                "p95": this["latency_p95_ms"],
                "cpu": cpu_ms(this),
                "cpu_ratio": cpu_ms(this) / cpu_ms(first) if cpu_ms(first) else math.nan,
            }
        )
    columns = [
        ("target", "run"),
        ("traced", "requests traced"),
        ("p50", "p50 ms"),
        ("p95", "p95 ms"),
        ("cpu", "service CPU ms a request"),
        ("cpu_ratio", f"CPU: this ÷ {first['target']}"),
    ]
    return "<h2>Tracing's cost</h2>" + table(rows, columns)


def verdicts(runs: list[dict[str, Any]]) -> str:
    """Each run's verdict (bench/verdict.py): the tier that limited it, and the evidence."""
    lines = []
    for run in runs:
        said = verdict(run)
        evidence = "".join(f"<li>{escape(one)}</li>" for one in said.evidence)
        lines.append(
            f"<div class='verdict'><b>{escape(run['summary']['target'])}: "
            f"{escape(said.head())}</b><ul>{evidence}</ul></div>"
        )
    return "".join(lines)


def frames(runs: list[dict[str, Any]]) -> str:
    """What each run's requests per transaction means, and the room Postgres had left."""
    said = []
    for run in runs:
        found = headroom(run)
        if found:
            lines = "".join(f"<li>{escape(line)}</li>" for line in found.lines())
            target = escape(run["summary"]["target"])
            said.append(f"<div class='meta'><b>{target}</b>: <ul>{lines}</ul></div>")
    return "".join(said)


def build(runs: list[dict[str, Any]], history: list[dict[str, Any]]) -> str:
    """The report for one invocation's runs, with earlier runs (`history`) compared below."""
    first = runs[0]
    summary, scenario, host = first["summary"], first["scenario"], first["machine"]
    sections = [
        f"<h1>numerator bench — {escape(summary['description'] or summary['schedule'])}</h1>",
        f"<p class='meta'>run {escape(summary['run_id'])} · {escape(str(summary['started_at']))}"
        f" · numerator {escape(summary['version'])} · {escape(host['host'])}: "
        f"{host['cpus']} CPUs, {host['memory_gb']} GB, Python {escape(host['python'])}</p>",
        f"<p class='meta'>schedule <code>{escape(scenario['schedule'])}</code> · mix "
        f"{escape(scenario['mix'])} over {scenario['counters']} counter(s) · count "
        f"{scenario['count']} · idempotency keys on {scenario['idempotency_share']:.0%} · "
        f"{scenario['connections']} connections · mode {escape(summary['mode'])} · "
        f"BACK_FRAME_MS {cell(summary['back_frame_ms'])} · workers {summary['workers']}</p>",
        "<h2>This run</h2>",
        verdicts(runs),
        table([r["summary"] for r in runs], HEADLINE),
        frames(runs),
        ratios(runs),
        tracing(runs),
        sweep(runs),
        distribution(runs),
    ]
    for run in runs:
        client = run["client"]
        sections.append(f"<h2>{escape(run['summary']['target'])}</h2>")
        sections.append(
            f"<p class='meta'>statuses {escape(counts(client['statuses']))} · errors "
            f"{escape(counts(client['errors']))} · missed sends "
            f"{client['missed_sends']} (worst {client['worst_late_ms']:.1f} ms late)</p>"
        )
        workers = run["settings"].get("workers") or 1
        environment = run["settings"].get("environment") or {}
        if environment:
            shown = ", ".join(f"{k}={v}" for k, v in environment.items())
            sections.append(f"<p class='meta'>service settings: {escape(shown)}</p>")
        if workers > 1 and run["summary"]["target"].startswith("numerator"):
            sections.append(
                f"<p class='meta'>{workers} workers: the service's counters above are those of "
                "the one worker that answered the bench's /metrics connection.</p>"
            )
        sections.append(charts(run))
        sections.append(aws(run))
        sections.append(hops(run))
    if history:
        sections.append("<h2>Compared with earlier runs</h2>")
        sections.append(table(history, HISTORY, mark=summary["run_id"]))
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>numerator bench {escape(summary['run_id'])}</title><style>{STYLE}</style>"
        f"</head><body>{''.join(sections)}</body></html>"
    )


def write(path: Path, runs: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
    path.write_text(build(runs, history))
