"""Management routes for flag usage and property value suggestions, added to ``admin.ROUTES``.

- ``GET .../feature_flags/{id}/usage/``: the flag's checks per UTC day and value, from the
  rollup ingestion keeps (``store/flag_usage.py``).
- ``GET .../persons/values/?key=``: values of a person property, most frequent first, in
  PostHog's shape (``[{"name", "count"}]``), from a bounded sample of the project's newest
  persons (``store/property_values.py``); ``value`` keeps those containing it.
- ``GET .../groups/property_values/?group_type_index=&key=``: the same for a group type.

Samples are kept per worker for :data:`VALUES_TTL_S` seconds, so a form asking for every
keystroke costs one sample query per key and minute.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from starlette.requests import Request

from flagstaff.application import flag_usage as usage
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.common import clock
from flagstaff.common.clock import ms_to_iso
from flagstaff.flags.validation import MAX_KEY_LENGTH
from flagstaff.http.admin_context import existing_flag
from flagstaff.http.rest import group_type_index_param, int_param
from flagstaff.store.base import Store
from flagstaff.store.property_values import ValueCount

MAX_USAGE_DAYS = 365
DEFAULT_SUGGESTIONS = 20
MAX_SUGGESTIONS = 100
MAX_VALUE_FILTER = 200
VALUES_TTL_S = 60.0
VALUES_CACHE_ENTRIES = 256


async def flag_usage(ctx: Caller[Store], request: Request) -> Any:
    flag = await existing_flag(ctx, request)
    days = int_param(request, "days", usage.WINDOW_DAYS)
    if not 1 <= days <= MAX_USAGE_DAYS:
        raise ApiError(400, "invalid_input", f"days must be 1-{MAX_USAGE_DAYS}", "days")
    now = clock.now_ms()
    key = str(flag["key"])
    rows = await ctx.store.flag_value_checks(ctx.project_id, key, usage.first_day(now, days))
    checks = usage.flag_checks(rows, now, usage.variant_keys(flag), days)
    last_seen = (await ctx.store.flag_last_seen(ctx.project_id, [key])).get(key)
    return {
        "flag_key": key,
        "days": [
            {
                "date": usage.day_label(day),
                "checks": total,
                "values": {s.value: s.counts[i] for s in checks.series if s.counts[i]},
            }
            for i, (day, total) in enumerate(zip(checks.days, checks.day_totals(), strict=True))
        ],
        "values": {s.value: s.total for s in checks.series if s.total},
        "total": checks.total,
        "checks_per_day": checks.total / days,
        "last_seen": ms_to_iso(last_seen) if last_seen is not None else None,
    }


class ValueCache:
    """Sampled values per (project, group type or None, key), for a while, at most
    :data:`VALUES_CACHE_ENTRIES` of them (the oldest go first)."""

    def __init__(self, ttl_s: float = VALUES_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._entries: OrderedDict[tuple[int, int | None, str], tuple[float, list[ValueCount]]]
        self._entries = OrderedDict()

    async def get(
        self, store: Store, project_id: int, key: str, group_type_index: int | None
    ) -> list[ValueCount]:
        cache_key = (project_id, group_type_index, key)
        now = time.monotonic()
        found = self._entries.get(cache_key)
        if found is not None and now - found[0] < self.ttl_s:
            return found[1]
        values = await store.property_values(project_id, key, group_type_index)
        self._entries[cache_key] = (now, values)
        self._entries.move_to_end(cache_key)
        while len(self._entries) > VALUES_CACHE_ENTRIES:
            self._entries.popitem(last=False)
        return values


VALUES = ValueCache()


def _suggestions(request: Request, values: list[ValueCount]) -> list[dict[str, Any]]:
    limit = int_param(request, "limit", DEFAULT_SUGGESTIONS, MAX_SUGGESTIONS)
    wanted = request.query_params.get("value") or ""
    if len(wanted) > MAX_VALUE_FILTER:
        raise ApiError(
            400, "invalid_input", f"value must be at most {MAX_VALUE_FILTER} characters", "value"
        )
    needle = wanted.lower()
    out = []
    for v in values:
        if needle and needle not in v.name.lower():
            continue
        out.append({"name": v.name, "count": v.count})
        if len(out) >= limit:
            break
    return out


def _key(request: Request) -> str:
    key = request.query_params.get("key") or ""
    if not key:
        raise ApiError(400, "required", "key is required", "key")
    if len(key) > MAX_KEY_LENGTH:
        raise ApiError(
            400, "invalid_input", f"key must be at most {MAX_KEY_LENGTH} characters", "key"
        )
    return key


async def person_values(ctx: Caller[Store], request: Request) -> Any:
    key = _key(request)
    return _suggestions(request, await VALUES.get(ctx.store, ctx.project_id, key, None))


async def group_values(ctx: Caller[Store], request: Request) -> Any:
    index = group_type_index_param(request)
    key = _key(request)
    return _suggestions(request, await VALUES.get(ctx.store, ctx.project_id, key, index))


ROUTES = [
    (
        "GET",
        "/feature_flags/{flag_id}/usage/",
        flag_usage,
        "A feature flag's checks per UTC day and value ($feature_flag_called events)",
    ),
    (
        "GET",
        "/persons/values/",
        person_values,
        "Values of a person property, most frequent first (a sample of the newest persons)",
    ),
    (
        "GET",
        "/groups/property_values/",
        group_values,
        "Values of a group property, most frequent first (a sample of the group type)",
    ),
]
"""Paths under ``/api/projects/{project_id}``."""
