"""Small bar charts drawn on the server as SVG (the template ``_bar_chart.html`` writes the
markup): geometry, axis ticks and the words a screen reader gets (title, description, one
title per bar). Pure: counts in, a chart model out."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from flagstaff.common.units import MINUTE_MS

EVENT_CHART_MINUTES = 60
EVENT_CHART_CAP = 10_000
"""Events counted per minute at most (a busier minute is drawn at this height and said to be
"or more"): the chart reads at most 60 x 10,000 entries of the timestamp index."""

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 40


class Bar(msgspec.Struct, frozen=True):
    x: float
    y: float
    width: float
    height: float
    label: str


class Tick(msgspec.Struct, frozen=True):
    at: float
    label: str


class BarChart(msgspec.Struct, frozen=True):
    id: str
    title: str
    description: str
    x_label: str
    y_label: str
    width: int
    height: int
    left: int
    top: int
    bottom: int
    """The plot's bottom edge (the x axis), from the top of the drawing."""
    right: int
    bars: list[Bar]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    rows: list[tuple[str, str]]
    """The data as (x, y) text, for the table under the chart."""


def nice_ceiling(n: int) -> int:
    """The smallest of 1, 2, 5 x 10^k at or above ``n`` (at least 1)."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if m * step >= n:
                return m * step
        step *= 10


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def _count(n: int, cap: int) -> str:
    return f"{n:,} or more" if n >= cap else f"{n:,}"


def events_per_minute_chart(counts: list[int], start_ms: int, cap: int) -> BarChart:
    """The live events page's chart: events by timestamp in each minute from ``start_ms``."""
    top_value = nice_ceiling(max(counts, default=0))
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    base = HEIGHT - BOTTOM
    slot = plot_w / max(len(counts), 1)
    bars = []
    rows = []
    for i, n in enumerate(counts):
        minute = start_ms + i * MINUTE_MS
        height = plot_h * n / top_value
        label = f"{_clock(minute)} UTC: {_count(n, cap)} events"
        bars.append(
            Bar(
                x=round(LEFT + i * slot + 1, 2),
                y=round(base - height, 2),
                width=round(max(slot - 2, 1), 2),
                height=round(height, 2),
                label=label,
            )
        )
        rows.append((f"{_clock(minute)} UTC", _count(n, cap)))
    x_ticks = [
        Tick(round(LEFT + i * slot + slot / 2, 2), _clock(start_ms + i * MINUTE_MS))
        for i in range(0, len(counts), 10)
    ]
    y_ticks = [Tick(round(base - plot_h * f, 2), f"{int(top_value * f):,}") for f in (0, 0.5, 1)]
    total = sum(counts)
    if total:
        peak = max(range(len(counts)), key=lambda i: counts[i])
        summary = (
            f"{total:,} events in the last {len(counts)} minutes; the busiest minute, "
            f"{_clock(start_ms + peak * MINUTE_MS)} UTC, had {_count(counts[peak], cap)}."
        )
    else:
        summary = f"No events in the last {len(counts)} minutes."
    end = start_ms + len(counts) * MINUTE_MS
    return BarChart(
        id="events-per-minute",
        title=f"Events per minute, {_clock(start_ms)} to {_clock(end)} UTC",
        description=summary,
        x_label="Time (UTC)",
        y_label="Events per minute",
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        top=TOP,
        bottom=base,
        right=WIDTH - RIGHT,
        bars=bars,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        rows=rows,
    )


def chart_start(now_ms: int, minutes: int = EVENT_CHART_MINUTES) -> int:
    """The first minute of a chart whose last bar is the current (partial) minute."""
    return (now_ms // MINUTE_MS - minutes + 1) * MINUTE_MS
