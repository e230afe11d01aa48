"""Suggestions of property values for the flag and cohort forms: a person property's (or a
group type's property's) values, most frequent first, in PostHog's shape
(``[{"name", "count"}]``), from a bounded sample of the project's newest persons
(``store/property_values.py``).

Samples are kept per worker for :data:`VALUES_TTL_S` seconds, so a form asking for every
keystroke costs one sample query per key and minute.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Protocol

from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.flags.validation import MAX_KEY_LENGTH
from flagstaff.store.property_values import ValueCount

DEFAULT_SUGGESTIONS = 20
MAX_SUGGESTIONS = 100
MAX_VALUE_FILTER = 200
VALUES_TTL_S = 60.0
VALUES_CACHE_ENTRIES = 256


class ValueStore(Protocol):
    async def property_values(
        self, project_id: int, key: str, group_type_index: int | None
    ) -> list[ValueCount]: ...


class ValueCache:
    """Sampled values per (project, group type or None, key), for a while, at most
    :data:`VALUES_CACHE_ENTRIES` of them (the oldest go first)."""

    def __init__(self, ttl_s: float = VALUES_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._entries: OrderedDict[tuple[int, int | None, str], tuple[float, list[ValueCount]]]
        self._entries = OrderedDict()

    async def get(
        self, store: ValueStore, project_id: int, key: str, group_type_index: int | None
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


def suggestion_json(value: ValueCount) -> dict[str, Any]:
    """A suggested value in PostHog's shape."""
    return {"name": value.name, "count": value.count}


async def suggestions(
    caller: Caller[ValueStore],
    key: str,
    group_type_index: int | None,
    wanted: str,
    limit: int,
) -> list[ValueCount]:
    """The values of property ``key`` containing ``wanted`` (any case), at most ``limit``."""
    if not key:
        raise ApiError(400, "required", "key is required", "key")
    if len(key) > MAX_KEY_LENGTH:
        raise ApiError(
            400, "invalid_input", f"key must be at most {MAX_KEY_LENGTH} characters", "key"
        )
    if len(wanted) > MAX_VALUE_FILTER:
        raise ApiError(
            400, "invalid_input", f"value must be at most {MAX_VALUE_FILTER} characters", "value"
        )
    values = await VALUES.get(caller.store, caller.project_id, key, group_type_index)
    needle = wanted.lower()
    out: list[ValueCount] = []
    for v in values:
        if needle and needle not in v.name.lower():
            continue
        out.append(v)
        if len(out) >= limit:
            break
    return out
