"""Line charts as inline SVG: no script, no network, nothing to load."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")
Series = tuple[str, list[tuple[float, float]]]


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = min(
        (m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), default=10 * magnitude
    )
    first = math.floor(low / step) * step
    out, value = [first], first
    while value < high - step * 1e-6:  # the last tick is at or above `high`
        value += step
        out.append(round(value, 10))
    return out


def label(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


@dataclass(frozen=True)
class Plot:
    """Where a chart's plot area lies, and the data range it spans."""

    left: int
    top: int
    width: int
    height: int
    x0: float
    x1: float
    y0: float
    y1: float

    def sx(self, x: float) -> float:
        return self.left + (x - self.x0) / ((self.x1 - self.x0) or 1) * self.width

    def sy(self, y: float) -> float:
        return self.top + self.height - (y - self.y0) / ((self.y1 - self.y0) or 1) * self.height


def line_chart(
    title: str,
    series: list[Series],
    x_label: str,
    y_label: str,
    width: int = 760,
    height: int = 280,
    x_names: dict[float, str] | None = None,
    log_y: bool = False,
) -> str:
    """A chart of `series` (name, [(x, y)]); `log_y` plots y on a log10 scale (y ≥ 0.1)."""
    if log_y:
        series = [(name, [(x, math.log10(max(y, 0.1))) for x, y in data]) for name, data in series]
    left, right, top, bottom = 64, 150, 30, 44
    points = [p for _, data in series for p in data]
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>'
    )
    if not points:
        return head + f'<text x="{left}" y="{top + 40}">no data</text></svg>'
    x_ticks = (
        sorted(x_names) if x_names else ticks(min(p[0] for p in points), max(p[0] for p in points))
    )
    if log_y:
        y_ticks = [float(t) for t in range(-1, math.ceil(max(p[1] for p in points)) + 1)]
    else:
        y_ticks = ticks(0.0, max(max(p[1] for p in points), 1e-9))
    plot = Plot(
        left,
        top,
        width - left - right,
        height - top - bottom,
        x_ticks[0],
        x_ticks[-1],
        y_ticks[0],
        y_ticks[-1],
    )
    parts = [head, *grid(plot, x_ticks, y_ticks, x_names, log_y)]
    parts += axes(plot, x_label, y_label, height)
    parts += lines(plot, series)
    parts.append("</svg>")
    return "".join(parts)


def grid(
    plot: Plot,
    x_ticks: list[float],
    y_ticks: list[float],
    x_names: dict[float, str] | None,
    log_y: bool,
) -> list[str]:
    """The grid lines, each with its tick's label."""
    parts = []
    left, top = plot.left, plot.top
    for y in y_ticks:
        parts.append(
            f'<line x1="{left}" x2="{left + plot.width}" y1="{plot.sy(y):.1f}" '
            f'y2="{plot.sy(y):.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{plot.sy(y) + 4:.1f}" font-size="11" '
            f'text-anchor="end">{label(10**y if log_y else y)}</text>'
        )
    for x in x_ticks:
        name = x_names[x] if x_names else label(x)
        parts.append(
            f'<line x1="{plot.sx(x):.1f}" x2="{plot.sx(x):.1f}" y1="{top}" '
            f'y2="{top + plot.height}" stroke="#eee"/>'
            f'<text x="{plot.sx(x):.1f}" y="{top + plot.height + 16}" font-size="11" '
            f'text-anchor="middle">{escape(name)}</text>'
        )
    return parts


def axes(plot: Plot, x_label: str, y_label: str, height: int) -> list[str]:
    """The plot's frame and the two axes' names."""
    left, top, w, h = plot.left, plot.top, plot.width, plot.height
    return [
        f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#888"/>',
        f'<text x="{left + w / 2}" y="{height - 6}" font-size="12" '
        f'text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="14" y="{top + h / 2}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + h / 2})">{escape(y_label)}</text>',
    ]


def lines(plot: Plot, series: list[Series]) -> list[str]:
    """Each series as a line, and its name in the legend on the right."""
    parts = []
    for n, (name, data) in enumerate(series):
        color = COLORS[n % len(COLORS)]
        if data:
            path = " ".join(f"{plot.sx(x):.1f},{plot.sy(y):.1f}" for x, y in data)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.8"/>'
            )
        ly = plot.top + 14 + n * 18
        right = plot.left + plot.width
        parts.append(
            f'<rect x="{right + 12}" y="{ly - 9}" width="12" height="3" '
            f'fill="{color}"/><text x="{right + 30}" y="{ly - 4}" '
            f'font-size="11">{escape(name)}</text>'
        )
    return parts
