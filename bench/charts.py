"""Line charts as inline SVG: no script, no network, nothing to load."""

from __future__ import annotations

import math
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
    plot_w, plot_h = width - left - right, height - top - bottom
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
        points = [p for _, data in series for p in data]
        y_ticks = [float(t) for t in range(-1, math.ceil(max(p[1] for p in points)) + 1)]
    else:
        y_ticks = ticks(0.0, max(max(p[1] for p in points), 1e-9))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]

    def sx(x: float) -> float:
        return left + (x - x0) / ((x1 - x0) or 1) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - (y - y0) / ((y1 - y0) or 1) * plot_h

    parts = [head]
    for y in y_ticks:
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" '
            'stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" font-size="11" '
            f'text-anchor="end">{label(10**y if log_y else y)}</text>'
        )
    for x in x_ticks:
        name = x_names[x] if x_names else label(x)
        parts.append(
            f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{top}" '
            f'y2="{top + plot_h}" stroke="#eee"/>'
            f'<text x="{sx(x):.1f}" y="{top + plot_h + 16}" font-size="11" '
            f'text-anchor="middle">{escape(name)}</text>'
        )
    parts.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#888"/>'
    )
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 6}" font-size="12" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append(
        f'<text x="14" y="{top + plot_h / 2}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + plot_h / 2})">{escape(y_label)}</text>'
    )
    for n, (name, data) in enumerate(series):
        color = COLORS[n % len(COLORS)]
        if data:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in data)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.8"/>'
            )
        ly = top + 14 + n * 18
        parts.append(
            f'<rect x="{left + plot_w + 12}" y="{ly - 9}" width="12" height="3" '
            f'fill="{color}"/><text x="{left + plot_w + 30}" y="{ly - 4}" '
            f'font-size="11">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
