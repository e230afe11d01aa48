"""What the console shows of a flag's usage, from the rollup rows ingestion keeps: checks per
day over the last :data:`WINDOW_DAYS` days (per value for one flag, all values for the list),
each value's share, and the mean per day, and the charts of them (drawn by ``usage_charts.py``).
No I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec
from markupsafe import Markup

from flagstaff.common.units import DAY_MS
from flagstaff.console import usage_charts
from flagstaff.console.views import FlagRow, FlagUsage
from flagstaff.ingest.flag_usage import NO_RESPONSE, day_of
from flagstaff.store.flag_usage import DailyChecks, ValueChecks

WINDOW_DAYS = 30
"""Days the list and the charts cover, today (UTC) included."""
NO_RESPONSE_LABEL = "no value"


def first_day(now_ms: int, days: int = WINDOW_DAYS) -> int:
    """The oldest day of the ``days`` that end today (UTC)."""
    return day_of(now_ms) - days + 1


def day_label(day: int) -> str:
    """A day as ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(day * DAY_MS / 1000, UTC).strftime("%Y-%m-%d")


def value_label(value: str) -> str:
    return NO_RESPONSE_LABEL if value == NO_RESPONSE else value


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
    start = first_day(now_ms)
    daily: dict[str, list[int]] = {}
    last: dict[str, int] = dict(last_seen)
    for row in rows:
        offset = row.day - start
        if not 0 <= offset < WINDOW_DAYS:
            continue
        counts = daily.get(row.flag_key)
        if counts is None:
            counts = daily[row.flag_key] = [0] * WINDOW_DAYS
        counts[offset] += row.checks
        if row.last_seen_ms > last.get(row.flag_key, -1):
            last[row.flag_key] = row.last_seen_ms
    out = {}
    for key, seen in last.items():
        counts = daily.get(key)
        out[key] = FlagUsage(
            checks_per_day=sum(counts) / WINDOW_DAYS if counts else 0.0,
            last_seen_ms=seen,
            daily=tuple(counts) if counts else (),
        )
    return out


class Series(msgspec.Struct, frozen=True):
    """One value's checks per day of the window."""

    value: str
    label: str
    counts: list[int]

    @property
    def total(self) -> int:
        return sum(self.counts)


class FlagChecks(msgspec.Struct, frozen=True):
    """One flag's checks over the window, a series per value (variants in the flag's order
    first, then ``true``, ``false``, other values, no value)."""

    days: list[int]
    series: list[Series]
    last_seen_ms: int | None

    @property
    def total(self) -> int:
        return sum(s.total for s in self.series)

    def day_labels(self) -> list[str]:
        return [day_label(d) for d in self.days]

    def day_totals(self) -> list[int]:
        return [sum(s.counts[i] for s in self.series) for i in range(len(self.days))]

    def shares(self) -> list[tuple[int, Series, float]]:
        """Each value checked (with its place in ``series``) and its share of the window's
        checks (0 to 1), largest first."""
        total = self.total
        ordered = sorted(enumerate(self.series), key=lambda item: -item[1].total)
        return [(i, s, s.total / total) for i, s in ordered if s.total]


def _order(values: Iterable[str], variants: Sequence[str]) -> list[str]:
    rank = {v: i for i, v in enumerate(variants)}
    fixed = {"true": len(rank), "false": len(rank) + 1}
    last = len(rank) + 3

    def key(value: str) -> tuple[int, str]:
        if value in rank:
            return rank[value], ""
        if value in fixed:
            return fixed[value], ""
        return (last + 1 if value == NO_RESPONSE else last), value

    return sorted(set(values), key=key)


def flag_checks(
    rows: Iterable[ValueChecks],
    now_ms: int,
    variants: Sequence[str] = (),
    days: int = WINDOW_DAYS,
) -> FlagChecks:
    """One flag's checks per value over the ``days`` ending today (UTC) from its rollup rows
    (rows outside are ignored; a variant of the flag with no checks still gets its empty
    series)."""
    start = first_day(now_ms, days)
    counts: dict[str, list[int]] = {v: [0] * days for v in variants}
    last: int | None = None
    for row in rows:
        offset = row.day - start
        if not 0 <= offset < days:
            continue
        series = counts.get(row.value)
        if series is None:
            series = counts[row.value] = [0] * days
        series[offset] += row.checks
        last = row.last_seen_ms if last is None else max(last, row.last_seen_ms)
    return FlagChecks(
        days=list(range(start, start + days)),
        series=[Series(v, value_label(v), counts[v]) for v in _order(counts, variants)],
        last_seen_ms=last,
    )


def variant_keys(flag: Mapping[str, Any]) -> list[str]:
    """The flag's variant keys in order (none for a boolean flag)."""
    multivariate = (flag.get("filters") or {}).get("multivariate") or {}
    return [str(v.get("key")) for v in multivariate.get("variants") or [] if v.get("key")]


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
