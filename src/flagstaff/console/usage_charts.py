"""Flag usage charts drawn on the server as SVG: a sparkline, bars stacked per value over
days, and share bars (``charts.py`` models the events page's bar chart for a template). Our
own code, no script: each chart is an ``<svg role="img">`` named by its ``<title>``
and described by its ``<desc>`` (the numbers in words), with axis labels, and every bar
carries a ``<title>`` of its own (a tooltip). Colours are presentation attributes, which the
console's CSP allows (``style`` attributes it would not). Pure: text in, markup out; every
text is escaped here."""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

PALETTE = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#d55e00",
    "#f0e442",
    "#555555",
)
"""Okabe and Ito's colours, told apart with the common colour blindnesses; then grey."""
INK = "#1d1f23"
GRID = "#d7dbe0"
MUTED = "#5d6470"
FONT = 'font-family="system-ui, sans-serif" font-size="11"'
CHAR_WIDTH = 6.5
"""An estimate of one character's width at font-size 11, to lay out legends and labels."""
MAX_LABEL = 28


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def number(n: float) -> str:
    """``1234`` as ``1,234``; fractions to one decimal."""
    if float(n).is_integer():
        return f"{int(n):,}"
    return f"{n:,.1f}"


def short(text: str, limit: int = MAX_LABEL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def nice_step(top: float, intervals: int = 4) -> int:
    """A round tick step (1, 2 or 5 times a power of ten) that covers ``top`` in about
    ``intervals`` steps."""
    if top <= intervals:
        return 1
    raw = top / intervals
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            return int(factor * power)
    return int(10 * power)  # pragma: no cover - the loop always returns


def svg_open(chart_id: str, width: int, height: int, title: str, desc: str, css: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" class="{css}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'aria-labelledby="{chart_id}-title {chart_id}-desc">'
        f'<title id="{chart_id}-title">{escape(title)}</title>'
        f'<desc id="{chart_id}-desc">{escape(desc)}</desc>'
    )


def sparkline(
    chart_id: str, values: Sequence[int], title: str, desc: str, width: int = 120, height: int = 24
) -> Markup:
    """A line of ``values`` (oldest first) scaled to its own peak; flat at the bottom when
    all are zero."""
    pad = 2
    peak = max(values, default=0)
    n = len(values)
    points = []
    for i, v in enumerate(values):
        x = pad + (width - 2 * pad) * (i / (n - 1) if n > 1 else 0.5)
        y = height - pad - ((height - 2 * pad) * v / peak if peak else 0)
        points.append(f"{x:.1f},{y:.1f}")
    body = ""
    if points:
        body = (
            f'<polyline points="{" ".join(points)}" fill="none" stroke="{PALETTE[0]}" '
            'stroke-width="1.5" stroke-linejoin="round"/>'
        )
    return Markup(svg_open(chart_id, width, height, title, desc, "chart spark") + body + "</svg>")


def svg_legend(names: Sequence[str], x0: float, width: float, y0: float) -> tuple[str, float]:
    """Legend items (swatch and name) laid out in rows from (x0, y0); returns the markup and
    the height used."""
    parts = []
    x, y = x0, y0
    for i, name in enumerate(names):
        label = short(name)
        item = 14 + len(label) * CHAR_WIDTH + 16
        if x > x0 and x + item > x0 + width:
            x, y = x0, y + 16
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="10" height="10" fill="{colour(i)}"/>'
            f'<text x="{x + 14:.1f}" y="{y + 9:.1f}" {FONT} fill="{INK}">{escape(label)}</text>'
        )
        x += item
    return "".join(parts), (y - y0 + 16 if names else 0)


def stacked_bars(
    chart_id: str,
    title: str,
    desc: str,
    x_labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[int]]],
    *,
    x_title: str,
    y_title: str,
    width: int = 640,
    height: int = 260,
    tick_every: int = 7,
) -> Markup:
    """One bar per x label, each series stacked in order (legend above when there are two or
    more), y axis in round ticks from 0, x labels every ``tick_every`` bars back from the
    last."""
    left, right, top, bottom = 56, 12, 8, 44
    plot_w = width - left - right
    legend, legend_h = svg_legend([n for n, _ in series], left, plot_w, top)
    if len(series) < 2:
        legend, legend_h = "", 0
    plot_top = top + legend_h + (6 if legend_h else 0)
    plot_h = height - plot_top - bottom
    n = len(x_labels)
    totals = [sum(counts[i] for _, counts in series) for i in range(n)]
    step = nice_step(max(totals, default=0))
    y_max = step * max(1, math.ceil(max(totals, default=0) / step))
    out = [svg_open(chart_id, width, height, title, desc, "chart bars"), legend]
    for tick in range(0, y_max + 1, step):
        y = plot_top + plot_h - plot_h * tick / y_max
        out.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="{GRID}" stroke-width="1"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT} fill="{MUTED}">'
            f"{number(tick)}</text>"
        )
    band = plot_w / n if n else plot_w
    bar = band * 0.78
    for i, label in enumerate(x_labels):
        x = left + band * i + (band - bar) / 2
        base = plot_top + plot_h
        for s, (name, counts) in enumerate(series):
            v = counts[i]
            if not v:
                continue
            h = plot_h * v / y_max
            base -= h
            out.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{colour(s)}"><title>{escape(label)}, {escape(name)}: '
                f"{number(v)}</title></rect>"
            )
        if (n - 1 - i) % tick_every == 0:
            out.append(
                f'<text x="{x + bar / 2:.1f}" y="{plot_top + plot_h + 14:.1f}" '
                f'text-anchor="middle" {FONT} fill="{MUTED}">{escape(label[5:] or label)}</text>'
            )
    axis_y = plot_top + plot_h
    out.append(
        f'<line x1="{left}" x2="{left + plot_w}" y1="{axis_y:.1f}" y2="{axis_y:.1f}" '
        f'stroke="{INK}" stroke-width="1"/>'
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle" {FONT} '
        f'fill="{INK}">{escape(x_title)}</text>'
        f'<text x="12" y="{plot_top + plot_h / 2:.1f}" text-anchor="middle" {FONT} '
        f'fill="{INK}" transform="rotate(-90 12 {plot_top + plot_h / 2:.1f})">'
        f"{escape(y_title)}</text></svg>"
    )
    return Markup("".join(out))


def share_bars(
    chart_id: str,
    title: str,
    desc: str,
    items: Sequence[tuple[str, int, float, int]],
    *,
    x_title: str,
    width: int = 640,
) -> Markup:
    """One horizontal bar per (name, count, share 0-1, colour index), each labelled with its
    percentage and count; the x axis runs from 0 to 100%. The colour index keeps a value's
    colour the same as in the other charts of the page."""
    row, top, bottom = 26, 8, 36
    label_w = min(MAX_LABEL, max((len(n) for n, *_ in items), default=4)) * CHAR_WIDTH + 12
    left = int(label_w)
    right = 130
    plot_w = width - left - right
    height = top + row * max(len(items), 1) + bottom
    out = [svg_open(chart_id, width, height, title, desc, "chart shares")]
    axis_y = top + row * max(len(items), 1)
    for pct in (0, 50, 100):
        x = left + plot_w * pct / 100
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{axis_y + 4}" stroke="{GRID}" '
            'stroke-width="1"/>'
            f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle" {FONT} fill="{MUTED}">'
            f"{pct}%</text>"
        )
    for i, (name, count, share, tint) in enumerate(items):
        y = top + row * i
        w = plot_w * share
        text = f"{share * 100:.1f}% ({number(count)})"
        out.append(
            f'<text x="{left - 8}" y="{y + 16}" text-anchor="end" {FONT} fill="{INK}">'
            f"{escape(short(name))}</text>"
            f'<rect x="{left}" y="{y + 4}" width="{w:.1f}" height="{row - 8}" '
            f'fill="{colour(tint)}"><title>{escape(name)}: {escape(text)}</title></rect>'
            f'<text x="{left + w + 6:.1f}" y="{y + 16}" {FONT} fill="{INK}">{escape(text)}</text>'
        )
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle" {FONT} '
        f'fill="{INK}">{escape(x_title)}</text></svg>'
    )
    return Markup("".join(out))
