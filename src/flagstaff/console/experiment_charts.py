"""The experiment page's charts, drawn on the server as SVG by our own code (the conventions
of ``usage_charts.py``: ``role="img"`` with a title and a description in words, a ``<title>``
tooltip on each mark, presentation attributes only).

``delta_bars`` draws each test variant's interval of the relative effect against the control's
(zero), as PostHog's experiment view does: a horizontal bar from the interval's low to its high
end, a tick at the effect, green when the variant is significantly better for the metric's goal,
red when significantly worse, grey otherwise. ``lines`` draws a count per day per series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
from markupsafe import Markup, escape

from flagstaff.console.usage_charts import (
    CHAR_WIDTH,
    FONT,
    GRID,
    INK,
    MUTED,
    colour,
    nice_step,
    number,
    short,
    svg_legend,
    svg_open,
)

WIN = "#1b7f3b"
LOSS = "#b3261e"
NEUTRAL = "#6b7785"


class Delta(msgspec.Struct, frozen=True):
    """One variant's relative effect against the control and its interval (fractions)."""

    key: str
    effect: float
    low: float
    high: float
    significant: bool
    better: bool
    """The effect goes the metric's way (up for ``increase``, down for ``decrease``)."""


def percent(x: float) -> str:
    """A relative effect as a signed percentage: ``0.1234`` is ``+12.3%``."""
    return f"{x * 100:+.1f}%"


def _bound(deltas: Sequence[Delta]) -> float:
    """Half the x range: a round percentage beyond every interval's ends."""
    reach = max((max(abs(d.low), abs(d.high), abs(d.effect)) for d in deltas), default=0.0)
    reach = max(reach * 1.1, 0.01)
    step = 10 ** math.floor(math.log10(reach))
    for factor in (1, 2, 2.5, 5, 10):
        if factor * step >= reach:
            return float(factor * step)
    return float(10 * step)  # pragma: no cover - the loop always returns


def delta_bars(chart_id: str, title: str, deltas: Sequence[Delta], width: int = 640) -> Markup:
    """Each variant's interval against the control's zero line (see the module's docstring)."""
    row, top, bottom = 34, 10, 38
    label_w = min(24, max((len(d.key) for d in deltas), default=4)) * CHAR_WIDTH + 14
    left, right = int(label_w), 120
    plot_w = width - left - right
    height = top + row * max(1, len(deltas)) + bottom
    bound = _bound(deltas)

    def x_of(value: float) -> float:
        return left + plot_w * (value + bound) / (2 * bound)

    words = "; ".join(
        f"{d.key}: {percent(d.effect)} (interval {percent(d.low)} to {percent(d.high)}), "
        + ("significant" if d.significant else "not significant")
        for d in deltas
    )
    out = [
        svg_open(chart_id, width, height, title, words or "No variant to compare.", "chart delta")
    ]
    axis_y = top + row * max(1, len(deltas))
    for i in range(-4, 5):
        value = bound * i / 4
        x = x_of(value)
        tick = f"{value * 100:+.0f}%" if i else "0%"
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{axis_y}" stroke="{GRID}" '
            'stroke-width="1"/>'
            f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle" {FONT} fill="{MUTED}">'
            f"{escape(tick)}</text>"
        )
    zero = x_of(0.0)
    out.append(
        f'<line x1="{zero:.1f}" x2="{zero:.1f}" y1="{top}" y2="{axis_y}" stroke="{INK}" '
        'stroke-width="1.5"/>'
    )
    for i, d in enumerate(deltas):
        y = top + row * i + row / 2
        fill = (WIN if d.better else LOSS) if d.significant else NEUTRAL
        low, high = x_of(max(d.low, -bound)), x_of(min(d.high, bound))
        out.append(
            f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end" {FONT} fill="{INK}">'
            f"{escape(short(d.key, 24))}</text>"
            f'<rect x="{low:.1f}" y="{y - 8:.1f}" width="{max(high - low, 2):.1f}" height="16" '
            f'rx="8" fill="{fill}" fill-opacity="0.35" stroke="{fill}" '
            f'data-variant="{escape(d.key)}">'
            f"<title>{escape(d.key)}: {percent(d.effect)}, interval {percent(d.low)} to "
            f"{percent(d.high)}</title></rect>"
            f'<line x1="{x_of(d.effect):.1f}" x2="{x_of(d.effect):.1f}" y1="{y - 10:.1f}" '
            f'y2="{y + 10:.1f}" stroke="{fill}" stroke-width="3"/>'
            f'<text x="{left + plot_w + 8}" y="{y + 4:.1f}" {FONT} fill="{INK}">'
            f"{escape(percent(d.effect))}</text>"
        )
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle" {FONT} '
        f'fill="{INK}">Change against control (interval of the relative effect)</text></svg>'
    )
    return Markup("".join(out))


def lines(
    chart_id: str,
    title: str,
    desc: str,
    x_labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[int]]],
    *,
    y_title: str,
    width: int = 640,
    height: int = 240,
    tick_every: int = 7,
    changes_only: bool = False,
) -> Markup:
    """A line per series over the x labels (oldest first), the y axis in round ticks from 0,
    a legend above; each point carries a tooltip (``changes_only``: each point that differs
    from the one before, for a cumulative line)."""
    left, right, top, bottom = 56, 24, 8, 30
    plot_w = width - left - right
    legend, legend_h = svg_legend([name for name, _ in series], left, plot_w, top)
    plot_top = top + legend_h + (6 if legend_h else 0)
    plot_h = height - plot_top - bottom
    peak = max((max(counts, default=0) for _, counts in series), default=0)
    step = nice_step(peak)
    y_max = step * max(1, math.ceil(peak / step))
    n = len(x_labels)

    def x_of(i: int) -> float:
        return left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y_of(v: int) -> float:
        return plot_top + plot_h - plot_h * v / y_max

    out = [svg_open(chart_id, width, height, title, desc, "chart lines"), legend]
    for tick in range(0, y_max + 1, step):
        y = y_of(tick)
        out.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}" '
            f'stroke-width="1"/><text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT} '
            f'fill="{MUTED}">{number(tick)}</text>'
        )
    for i, label in enumerate(x_labels):
        if (n - 1 - i) % tick_every == 0:
            out.append(
                f'<text x="{x_of(i):.1f}" y="{plot_top + plot_h + 14:.1f}" text-anchor="middle" '
                f'{FONT} fill="{MUTED}">{escape(label[5:] or label)}</text>'
            )
    for s, (name, counts) in enumerate(series):
        points = " ".join(f"{x_of(i):.1f},{y_of(v):.1f}" for i, v in enumerate(counts))
        out.append(
            f'<polyline points="{points}" fill="none" stroke="{colour(s)}" stroke-width="2" '
            f'stroke-linejoin="round" data-series="{escape(name)}" '
            f'data-last="{counts[-1] if counts else 0}"/>'
        )
        out.extend(
            f'<circle cx="{x_of(i):.1f}" cy="{y_of(v):.1f}" r="2.5" fill="{colour(s)}">'
            f"<title>{escape(x_labels[i])}, {escape(name)}: {number(v)}</title></circle>"
            for i, v in enumerate(counts)
            if (v != counts[i - 1] if changes_only and i else v)
        )
    axis_y = plot_top + plot_h
    out.append(
        f'<line x1="{left}" x2="{left + plot_w}" y1="{axis_y:.1f}" y2="{axis_y:.1f}" '
        f'stroke="{INK}" stroke-width="1"/>'
        f'<text x="12" y="{plot_top + plot_h / 2:.1f}" text-anchor="middle" {FONT} '
        f'fill="{INK}" transform="rotate(-90 12 {plot_top + plot_h / 2:.1f})">'
        f"{escape(y_title)}</text></svg>"
    )
    return Markup("".join(out))
