"""One request's hops from a trace file (bench/waterfall.py), on trace spans a real run wrote:
`numerator up --aws moto --trace FILE`, a dozen /next on the server edge (runs/trace.jsonl keeps
two of them, a counter's creation, and a line cut short)."""

from __future__ import annotations

import re
from pathlib import Path

from bench import waterfall

TRACE = Path(__file__).parent / "runs" / "trace.jsonl"
HOPS = {waterfall.NEXT, "front frame", "put", "reply", "frame", "read", "collect", "commit",
        "publish"}  # fmt: skip


def test_a_requests_hops_are_gathered_through_the_links() -> None:
    """The request's trace holds only the request: its front frame links to it, and the
    batcher's frame links to the front frame's put: two traces away, found all the same."""
    spans = waterfall.read(TRACE)
    assert len(spans) == len(TRACE.read_text().splitlines()) - 1  # the line cut short: left out
    for pick in ("median", "slowest"):
        chosen = waterfall.hops(spans, pick)
        assert {s["name"] for s in chosen} == HOPS, pick
        assert [s["start"] for s in chosen] == sorted(s["start"] for s in chosen)
        assert len({s["trace"] for s in chosen}) == 3  # the request, the front frame, the frame
    assert waterfall.hops(spans, "median") != waterfall.hops(spans, "slowest")


def test_a_file_without_a_whole_request_has_no_hops() -> None:
    spans = [s for s in waterfall.read(TRACE) if s["name"] != "frame"]
    assert waterfall.hops(spans) == []
    assert waterfall.svg([]) == ""


def test_the_waterfall_draws_a_row_a_hop_on_one_time_axis() -> None:
    chosen = waterfall.hops(waterfall.read(TRACE))
    drawn = waterfall.svg(chosen, "one /next")
    assert drawn.startswith("<svg") and drawn.endswith("</svg>")
    assert drawn.count("<rect") == len(chosen) + 1  # the background, and a bar a hop
    widths = [float(w) for w in re.findall(r"<rect x='[\d.]+' y='\d+' width='([\d.]+)'", drawn)]
    assert max(widths) <= waterfall.BAR_PX + 0.1
    took = waterfall.summary(chosen)
    assert took["commit"] > 0 and took[waterfall.NEXT] >= took["put"]


def test_the_command_prints_each_hop_and_writes_the_picture(tmp_path: Path) -> None:
    out = tmp_path / "hops.svg"
    waterfall.main([str(TRACE), "--svg", str(out)])
    assert out.read_text().startswith("<svg")
