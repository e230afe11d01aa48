"""A flag's usage from the rollup rows ingestion keeps (``store/flag_usage.py``): checks per
day over the last :data:`WINDOW_DAYS` days, per value, in the order the API and the console
show them (pure: :func:`flag_checks`), and the API's usage answer (:func:`flag_usage`, which
:func:`usage_json` renders)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import msgspec

from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.common import clock
from flagstaff.common.clock import ms_to_iso
from flagstaff.common.units import DAY_MS
from flagstaff.flags.records import FeatureFlag
from flagstaff.ingest.flag_usage import NO_RESPONSE, day_of
from flagstaff.store.flag_usage import DailyChecks, ValueChecks

WINDOW_DAYS = 30
"""Days the list and the charts cover, today (UTC) included."""
MAX_USAGE_DAYS = 365
"""The longest window the API answers."""
NO_RESPONSE_LABEL = "no value"


def first_day(now_ms: int, days: int = WINDOW_DAYS) -> int:
    """The oldest day of the ``days`` that end today (UTC)."""
    return day_of(now_ms) - days + 1


def day_label(day: int) -> str:
    """A day as ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(day * DAY_MS / 1000, UTC).strftime("%Y-%m-%d")


def value_label(value: str) -> str:
    return NO_RESPONSE_LABEL if value == NO_RESPONSE else value


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


R = TypeVar("R", ValueChecks, DailyChecks)


def daily_counts(
    rows: Iterable[R],
    key_of: Callable[[R], str],
    now_ms: int,
    days: int = WINDOW_DAYS,
    counts: dict[str, list[int]] | None = None,
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Rollup rows added up per key (a value, a flag) and day over the ``days`` ending today
    (UTC), oldest first, into ``counts`` (new when None), and each key's last check among
    them; rows outside the window are ignored."""
    start = first_day(now_ms, days)
    counts = {} if counts is None else counts
    last: dict[str, int] = {}
    for row in rows:
        offset = row.day - start
        if not 0 <= offset < days:
            continue
        key = key_of(row)
        series = counts.get(key)
        if series is None:
            series = counts[key] = [0] * days
        series[offset] += row.checks
        if row.last_seen_ms > last.get(key, -1):
            last[key] = row.last_seen_ms
    return counts, last


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
    counts, last = daily_counts(
        rows, lambda row: row.value, now_ms, days, {v: [0] * days for v in variants}
    )
    return FlagChecks(
        days=list(range(start, start + days)),
        series=[Series(v, value_label(v), counts[v]) for v in _order(counts, variants)],
        last_seen_ms=max(last.values(), default=None),
    )


def variant_keys(filters: Mapping[str, Any]) -> list[str]:
    """The variant keys of a flag's ``filters``, in order (none for a boolean flag)."""
    multivariate = filters.get("multivariate") or {}
    return [str(v.get("key")) for v in multivariate.get("variants") or [] if v.get("key")]


class LastSeenReads(Protocol):
    async def flag_last_seen(self, project_id: int, keys: list[str]) -> dict[str, int]: ...


class UsageStore(LastSeenReads, Protocol):
    async def flag_value_checks(
        self, project_id: int, flag_key: str, since_day: int
    ) -> list[ValueChecks]: ...


class DailyReads(Protocol):
    async def flag_daily_checks(
        self, project_id: int, since_day: int, keys: list[str]
    ) -> list[DailyChecks]: ...


async def last_seen(store: LastSeenReads, project_id: int, keys: Sequence[str]) -> dict[str, int]:
    """The last check ever of each of these flags (never checked: left out)."""
    return await store.flag_last_seen(project_id, list(keys))


async def daily_checks(
    store: DailyReads, project_id: int, keys: Sequence[str], now_ms: int
) -> list[DailyChecks]:
    """These flags' checks per UTC day over the :data:`WINDOW_DAYS` days ending today, values
    added together (the rollup rows; :func:`daily_counts` adds them up)."""
    return await store.flag_daily_checks(project_id, first_day(now_ms), list(keys))


async def window_checks(
    store: UsageStore, project_id: int, flag: FeatureFlag, now_ms: int
) -> FlagChecks:
    """The flag's checks per value over the :data:`WINDOW_DAYS` days ending today; its last
    check is read apart (any time) only when the window has none."""
    key = flag.key
    rows = await store.flag_value_checks(project_id, key, first_day(now_ms))
    checks = flag_checks(rows, now_ms, variant_keys(flag.filters))
    if checks.last_seen_ms is None:
        seen = await last_seen(store, project_id, [key])
        checks = msgspec.structs.replace(checks, last_seen_ms=seen.get(key))
    return checks


class UsageRebuild(Protocol):
    async def recompute_flag_usage(self, project_id: int) -> int: ...


async def recompute_usage(store: UsageRebuild, project_id: int) -> int:
    """Rebuild the project's flag usage from its stored ``$feature_flag_called`` events
    (after an upgrade: the history); how many events were read."""
    return await store.recompute_flag_usage(project_id)


class FlagUsage(msgspec.Struct, frozen=True):
    """A flag's checks over the ``days`` the API was asked for, and its last check (any
    time)."""

    flag_key: str
    days: int
    checks: FlagChecks
    last_seen_ms: int | None


async def flag_usage(caller: Caller[UsageStore], flag: FeatureFlag, days: int) -> FlagUsage:
    """The flag's checks per UTC day and value over the ``days`` ending today."""
    if not 1 <= days <= MAX_USAGE_DAYS:
        raise ApiError(400, "invalid_input", f"days must be 1-{MAX_USAGE_DAYS}", "days")
    now = clock.now_ms()
    key = flag.key
    rows = await caller.store.flag_value_checks(caller.project_id, key, first_day(now, days))
    checks = flag_checks(rows, now, variant_keys(flag.filters), days)
    seen = (await last_seen(caller.store, caller.project_id, [key])).get(key)
    return FlagUsage(key, days, checks, seen)


def usage_json(usage: FlagUsage) -> dict[str, Any]:
    """A flag's usage as the API answers it."""
    checks = usage.checks
    return {
        "flag_key": usage.flag_key,
        "days": [
            {
                "date": day_label(day),
                "checks": total,
                "values": {s.value: s.counts[i] for s in checks.series if s.counts[i]},
            }
            for i, (day, total) in enumerate(zip(checks.days, checks.day_totals(), strict=True))
        ],
        "values": {s.value: s.total for s in checks.series if s.total},
        "total": checks.total,
        "checks_per_day": checks.total / usage.days,
        "last_seen": ms_to_iso(usage.last_seen_ms) if usage.last_seen_ms is not None else None,
    }
