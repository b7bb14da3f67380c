"""Line charts as inline SVG: no script, no network, nothing to load."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
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


def _x_ticks(
    points: list[tuple[float, float]],
    x_names: dict[float, str] | None,
    x_range: tuple[float, float] | None,
) -> list[float]:
    if x_names:
        return sorted(x_names)
    if x_range is None:
        return ticks(min(p[0] for p in points), max(p[0] for p in points))
    x_ticks = [t for t in ticks(*x_range) if t <= x_range[1] + 1e-9]
    if x_ticks[-1] < x_range[1]:
        x_ticks.append(x_range[1])  # the run's end, where the axis ends
    return x_ticks


def line_chart(
    title: str,
    series: list[Series],
    x_label: str,
    y_label: str,
    width: int = 760,
    height: int = 280,
    x_names: dict[float, str] | None = None,
    log_y: bool = False,
    right: list[Series] | None = None,
    right_label: str = "",
    x_range: tuple[float, float] | None = None,
) -> str:
    """A chart of `series` (name, [(x, y)]) on the left axis, and of `right` (dashed) on an axis
    of its own on the right, for a quantity of another unit or size; `log_y` plots the left
    axis's y on a log10 scale (y ≥ 0.1); `x_range` fixes the x axis (the run's seconds), and
    points outside it are left out."""
    if log_y:
        series = [(name, [(x, math.log10(max(y, 0.1))) for x, y in data]) for name, data in series]
    right = right or []
    if x_range is not None:
        low, high = x_range
        series, right = (
            [(name, [(x, y) for x, y in data if low <= x <= high]) for name, data in group]
            for group in (series, right)
        )
    left, margin, top, bottom = 64, 150 + (48 if right else 0), 30, 44
    points = [p for _, data in series for p in data]
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>'
    )
    every = points + [p for _, data in right for p in data]
    if not every:
        return head + f'<text x="{left}" y="{top + 40}">no data</text></svg>'
    x_ticks = _x_ticks(every, x_names, x_range)
    if log_y:
        y_ticks = [float(t) for t in range(-1, math.ceil(max(p[1] for p in points)) + 1)]
    else:
        y_ticks = ticks(0.0, max([p[1] for p in points] + [1e-9]))
    size = (width - left - margin, height - top - bottom)
    plot = Plot(left, top, *size, x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1])
    parts = [head, *grid(plot, x_ticks, y_ticks, x_names, log_y)]
    parts += axes(plot, x_label, y_label, height)
    legend = 56 if right else 0  # past the right axis's labels
    parts += lines(plot, series, legend=legend)
    if right:
        r_ticks = ticks(0.0, max([p[1] for _, data in right for p in data] + [1e-9]))
        other = replace(plot, y0=r_ticks[0], y1=r_ticks[-1])
        parts += right_axis(other, r_ticks, right_label)
        parts += lines(other, right, first=len(series), dashed=True, legend=legend)
    parts.append("</svg>")
    return "".join(parts)


def right_axis(plot: Plot, y_ticks: list[float], name: str) -> list[str]:
    """The right axis's tick labels and name (its grid lines would cross the left one's)."""
    edge = plot.left + plot.width
    middle = plot.top + plot.height / 2
    parts = [
        f'<text x="{edge + 6}" y="{plot.sy(y) + 4:.1f}" font-size="11">{label(y)}</text>'
        for y in y_ticks
    ]
    parts.append(
        f'<text x="{edge + 44}" y="{middle}" font-size="12" text-anchor="middle" '
        f'transform="rotate(90 {edge + 44} {middle})">{escape(name)} (dashed)</text>'
    )
    return parts


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


def lines(
    plot: Plot, series: list[Series], first: int = 0, dashed: bool = False, legend: int = 0
) -> list[str]:
    """Each series as a line (`dashed`: on the right axis), and its name in the legend, `legend`
    pixels right of the plot; `first` is the first series' place in the legend and colours."""
    parts = []
    dash = ' stroke-dasharray="5 2"' if dashed else ""
    legend += plot.left + plot.width
    for n, (name, data) in enumerate(series, start=first):
        color = COLORS[n % len(COLORS)]
        if data:
            path = " ".join(f"{plot.sx(x):.1f},{plot.sy(y):.1f}" for x, y in data)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.8"{dash}/>'
            )
        ly = plot.top + 14 + n * 18
        parts.append(
            f'<line x1="{legend + 12}" x2="{legend + 26}" y1="{ly - 7.5}" y2="{ly - 7.5}" '
            f'stroke="{color}" stroke-width="3"{dash}/><text x="{legend + 30}" y="{ly - 4}" '
            f'font-size="11">{escape(name)}</text>'
        )
    return parts
