"""What the console shows of a flag's usage, from the rollup rows ingestion keeps: checks per
day over the last :data:`WINDOW_DAYS` days (per value for one flag, all values for the list),
each value's share, and the mean per day, and the charts of them (drawn by ``usage_charts.py``).
No I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec
from markupsafe import Markup

from flagstaff.application.flag_usage import (
    NO_RESPONSE_LABEL,
    WINDOW_DAYS,
    FlagChecks,
    daily_counts,
)
from flagstaff.console import usage_charts
from flagstaff.console.views import FlagRow, FlagUsage
from flagstaff.store.flag_usage import DailyChecks


def last_checks(last_seen: Mapping[str, int]) -> dict[str, FlagUsage]:
    """Usage that knows only each flag's last check (enough to tell which are stale)."""
    return {key: FlagUsage(last_seen_ms=ms) for key, ms in last_seen.items()}


def with_usage(rows: Iterable[FlagRow], used: Mapping[str, FlagUsage]) -> list[FlagRow]:
    """The rows with their checks per day (the flags list reads them for one page only)."""
    out = []
    for row in rows:
        found = used.get(row.key)
        if found is not None:
            row = msgspec.structs.replace(
                row, checks_per_day=found.checks_per_day, daily=found.daily
            )
        out.append(row)
    return out


def usage_by_flag(
    rows: Iterable[DailyChecks], last_seen: Mapping[str, int], now_ms: int
) -> dict[str, FlagUsage]:
    """Each flag's usage for the list: checks per day of the window (oldest first), their mean,
    and the last check (from ``last_seen`` for flags not checked in the window)."""
    daily, in_window = daily_counts(rows, lambda row: row.flag_key, now_ms)
    last: dict[str, int] = dict(last_seen)
    for key, seen in in_window.items():
        if seen > last.get(key, -1):
            last[key] = seen
    out = {}
    for key, seen in last.items():
        counts = daily.get(key)
        out[key] = FlagUsage(
            checks_per_day=sum(counts) / WINDOW_DAYS if counts else 0.0,
            last_seen_ms=seen,
            daily=tuple(counts) if counts else (),
        )
    return out


class FlagCharts(msgspec.Struct, frozen=True):
    """A flag page's charts (SVG markup) and the numbers behind them."""

    checks: FlagChecks
    timeline: Markup
    split: Markup | None
    """Only when more than one value was seen."""


def flag_charts(key: str, checks: FlagChecks) -> FlagCharts:
    """The flag page's charts: checks per day stacked by value, and each value's share."""
    days = checks.day_labels()
    span = f"from {days[0]} to {days[-1]} (UTC)"
    per_value = "; ".join(
        f"{s.label} {usage_charts.number(s.total)}" for s in checks.series if s.total
    )
    timeline = usage_charts.stacked_bars(
        "flag-checks",
        f"Checks of {key} per day, last {WINDOW_DAYS} days",
        f"{usage_charts.number(checks.total)} checks {span}"
        + (f": {per_value}." if per_value else ", none recorded."),
        days,
        [(s.label, s.counts) for s in checks.series] or [(NO_RESPONSE_LABEL, [0] * len(days))],
        x_title="Day (UTC)",
        y_title="Checks",
    )
    shares = checks.shares()
    split = None
    if len(shares) > 1:
        split = usage_charts.share_bars(
            "flag-split",
            f"Share of checks of {key} per value, last {WINDOW_DAYS} days",
            "; ".join(
                f"{s.label} {share * 100:.1f}% ({usage_charts.number(s.total)})"
                for _, s, share in shares
            )
            + ".",
            [(s.label, s.total, share, i) for i, s, share in shares],
            x_title="Share of checks",
        )
    return FlagCharts(checks, timeline, split)


def sparkline(row: FlagRow) -> Markup:
    """The flags list's line of a flag's checks per day."""
    total = sum(row.daily)
    if total:
        desc = (
            f"{usage_charts.number(total)} checks in the last {WINDOW_DAYS} days, "
            f"at most {usage_charts.number(max(row.daily))} a day."
        )
    else:
        desc = f"No checks in the last {WINDOW_DAYS} days."
    values = list(row.daily) or [0] * WINDOW_DAYS
    return usage_charts.sparkline(f"spark-{row.id}", values, f"Checks of {row.key} per day", desc)
