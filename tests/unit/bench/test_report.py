"""The bench's HTML report as a reader sees it: quantities of other units on axes of their own,
x axes that end with the run, statuses written for people, the p99s told apart."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench import report
from bench.charts import line_chart

RUNS = Path(__file__).parent / "runs"


def svg_of(html: str, title: str) -> str:
    start = html.index(f'aria-label="{title}"')
    return html[start : html.index("</svg>", start)]


def tick_labels(svg: str, anchor: str) -> list[str]:
    return re.findall(rf'font-size="11" text-anchor="{anchor}">([^<]+)</text>', svg)


def test_a_second_quantity_gets_an_axis_of_its_own_and_the_x_axis_ends_with_the_run() -> None:
    percent = [("cpu %", [(0.5, 30.0), (1.5, 40.0)])]
    megabytes = [("rss MB", [(0.5, 900.0), (1.5, 910.0), (12.4, 920.0)])]
    svg = line_chart(
        "c", percent, "second", "%", right=megabytes, right_label="MB", x_range=(0.0, 10.0)
    )
    left = [float(t) for t in tick_labels(svg, "end")]
    assert max(left) == 40, "the % axis is scaled to the % series, not to the MB"
    assert "1k" in svg and "MB (dashed)" in svg and 'stroke-dasharray="5 2"' in svg
    assert tick_labels(svg, "middle")[-1] == "10", "the x axis ends at the run's end"
    assert "12.4" not in svg and svg.count("<polyline") == 2
    one = line_chart("c", percent, "second", "%")
    assert "dashed" not in one, "a single axis when there is one quantity"


def test_the_report_of_a_run_reads_as_a_person_would_want() -> None:
    run = json.loads((RUNS / "over.json").read_text())
    html = report.build([run], [])
    assert "{'200'" not in html and "statuses 200: 120,000 ·" in html
    frames = svg_of(html, "Frames: size and transactions")
    assert "transactions / s (dashed)" in frames and "records per frame" in frames
    resources = svg_of(html, "Service CPU and memory")
    assert "RSS MB (dashed)" in resources
    for title in ("Frames: size and transactions", "Offered vs achieved rate, records in vs out"):
        ends = tick_labels(svg_of(html, title), "middle")
        assert float(ends[-1]) == 15, (title, ends)  # a 15 s run (14.98 s measured)
    assert "worst second's of the last 5 s" in html


def test_tracing_runs_show_their_cost_and_one_requests_hops() -> None:
    """`--trace-cost`'s runs: tracing's cost against the first (off), and the traced run's
    section draws the hops its record keeps (bench/run.py `traced`)."""
    from bench import waterfall

    off = json.loads((RUNS / "over.json").read_text())
    on = json.loads((RUNS / "over.json").read_text())
    off["summary"]["target"], on["summary"]["target"] = "numerator[tracing off]", "numerator[t]"
    hops = waterfall.hops(waterfall.read(RUNS / "trace.jsonl"))
    on["trace"] = {"file": "/tmp/t.jsonl", "spans": 19, "requests": 2, "hops": hops}
    html = report.build([off, on], [])
    assert "<h2>Tracing's cost</h2>" in html and "CPU: this ÷ numerator[tracing off]" in html
    assert html.count("<h3>One request's hops</h3>") == 1
    assert "19 trace spans, 2 requests traced" in html and "commit" in html
    assert "Tracing's cost" not in report.build([off], [])


def test_an_aws_run_shows_each_hop_of_its_requests() -> None:
    """The hops a run's record keeps (bench/hops.py, from numerator_hop_seconds) as a table in
    its AWS section; a record from before them shows none."""
    run = json.loads((RUNS / "aws.json").read_text())
    assert "hops" not in run["service"]["totals"]
    assert "Each hop of a request" not in report.build([run], [])
    run["service"]["totals"]["hops"] = {
        "front": {"count": 800.0, "mean_ms": 23.3, "p95_ms": 48.0},
        "stream": {"count": 30.0, "mean_ms": 31.3, "p95_ms": 94.0},
    }
    html = report.build([run], [])
    assert "Each hop of a request" in html
    section = html[html.index("Each hop of a request") :]
    assert "<td>front</td>" in section and "23.3" in section and "94" in section
