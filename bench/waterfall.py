"""One request's hops as a waterfall, from a trace file (`numerator up --trace FILE`, TRACE_FILE:
a finished trace span a JSON line, infra/observe/otel.py `line`).

A /next is a trace of its own at the edge (the request, its put, its reply's wait); the batcher's
frame that served it is another trace, linked to the put (and on the server edge the front frame
between them, linked to the request). `hops` follows the links from one request to gather them,
and `svg` draws them on one time axis.

    python -m bench.waterfall TRACE_FILE --svg docs/trace.svg
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from html import escape
from pathlib import Path
from typing import Any

NEXT = "POST /counters/{name}/next"
ROW_PX, LABEL_PX, BAR_PX = 22, 250, 560


def read(path: Path) -> list[dict[str, Any]]:
    """The trace spans a trace file holds (a line cut short by a process killed as it wrote
    is left out)."""
    spans = []
    for text in path.read_text().splitlines():
        try:
            spans.append(json.loads(text))
        except ValueError:
            continue
    return spans


def hops(spans: list[dict[str, Any]], pick: str = "median") -> list[dict[str, Any]]:
    """One 200 /next's trace spans and those linked to them (its front frame, its batcher's
    frame, and theirs), in the order they began; [] when the file holds no whole one. `pick`:
    the request that took the `median` time among those whose batcher's frame is in the file,
    or the `slowest`."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_trace.setdefault(span["trace"], []).append(span)
    linked: dict[str, set[str]] = {}  # a span id -> the traces that link to it
    for span in spans:
        for link in span.get("links", ()):
            linked.setdefault(link["span"], set()).add(span["trace"])
    whole = []
    for request in spans:
        if request["name"] != NEXT or request["attributes"].get("http.response.status_code") != 200:
            continue
        found = _gathered(request["trace"], by_trace, linked)
        if any(s["name"] == "frame" for s in found):
            whole.append((request["end"] - request["start"], request["span"], found))
    if not whole:
        return []
    whole.sort(key=lambda item: (item[0], item[1]))
    _, _, chosen = whole[-1] if pick == "slowest" else whole[(len(whole) - 1) // 2]
    return sorted(chosen, key=lambda s: (s["start"], s["name"]))


def _gathered(
    trace: str, by_trace: dict[str, list[dict[str, Any]]], linked: dict[str, set[str]]
) -> list[dict[str, Any]]:
    """The spans of `trace`, and of every trace linked to one of them, transitively."""
    seen, todo, out = {trace}, [trace], []
    while todo:
        spans = by_trace.get(todo.pop(), [])
        out.extend(spans)
        for span in spans:
            for other in linked.get(span["span"], ()):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
    return out


def depth(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> int:
    level, parent = 0, span.get("parent")
    while parent in by_id and level < 10:
        level, parent = level + 1, by_id[parent].get("parent")
    return level


def svg(chosen: list[dict[str, Any]], title: str = "one /next, its hops") -> str:
    """The trace spans `chosen` as an SVG waterfall: a row each, indented under its parent,
    a bar on one time axis from the first's start, its duration in ms."""
    if not chosen:
        return ""
    by_id = {s["span"]: s for s in chosen}
    zero = min(s["start"] for s in chosen)
    total = max(s["end"] for s in chosen) - zero or 1
    scale = BAR_PX / total
    height = ROW_PX * (len(chosen) + 2)
    width = LABEL_PX + BAR_PX + 90
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' font-family='sans-serif' font-size='12'>",
        f"<rect width='{width}' height='{height}' fill='white'/>",
        f"<text x='6' y='15' font-weight='bold'>{escape(title)} · {total / 1e6:.1f} ms</text>",
    ]
    colours = {"edge": "#4e79a7", "batcher": "#f28e2b", "lambda": "#59a14f"}
    for row, span in enumerate(chosen, start=1):
        y = ROW_PX * row + 6
        service = span.get("service", "")
        colour = next((c for k, c in colours.items() if k in service), "#76b7b2")
        if span["name"] in ("frame", "read", "collect", "commit", "publish"):
            colour = colours["batcher"]
        how = span.get("attributes", {}).get("numerator.reply.via")
        label = "  " * depth(span, by_id) + span["name"] + (f" ({how})" if how else "")
        x = LABEL_PX + (span["start"] - zero) * scale
        bar = max(1.0, (span["end"] - span["start"]) * scale)
        took = (span["end"] - span["start"]) / 1e6
        parts.append(
            f"<text x='6' y='{y + 13}' xml:space='preserve'>{escape(label)}"
            f"<title>{escape(service)}</title></text>"
            f"<rect x='{x:.1f}' y='{y + 2}' width='{bar:.1f}' height='{ROW_PX - 8}' "
            f"fill='{colour}'/>"
            f"<text x='{x + bar + 4:.1f}' y='{y + 13}'>{took:.2f} ms</text>"
        )
    legend = "blue: the edge · green: the Lambda edge · orange: the batcher (a linked trace)"
    parts.append(f"<text x='6' y='{height - 6}' fill='#555'>{escape(legend)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def summary(chosen: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Each hop's duration in ms, by name (the first of a name)."""
    out: dict[str, float] = {}
    for span in chosen:
        out.setdefault(span["name"], round((span["end"] - span["start"]) / 1e6, 3))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.waterfall", description=__doc__)
    parser.add_argument("file", type=Path, help="a trace file (TRACE_FILE)")
    parser.add_argument("--svg", type=Path, help="write the waterfall here")
    parser.add_argument("--pick", choices=["median", "slowest"], default="median")
    args = parser.parse_args(argv)
    chosen = hops(read(args.file), args.pick)
    if not chosen:
        raise SystemExit(f"{args.file}: no /next with its batcher's frame in it")
    for name, ms in summary(chosen).items():
        print(f"{name:32} {ms:9.3f} ms")
    if args.svg:
        args.svg.write_text(svg(chosen) + "\n")
        print(f"svg: {args.svg}")


if __name__ == "__main__":
    main()
