"""The answers of the flag usage and property value routes (``http/admin_usage.py``), for
/api/schema/."""

from __future__ import annotations

import msgspec


class FlagUsageDay(msgspec.Struct):
    date: str
    """The UTC day, ``YYYY-MM-DD``."""
    checks: int
    values: dict[str, int]
    """Checks per value that day (``true``, ``false``, a variant key; ``""``: none sent)."""


class FlagUsage(msgspec.Struct):
    """A flag's checks (``$feature_flag_called`` events) over the days ending today."""

    flag_key: str
    days: list[FlagUsageDay]
    """Every day of the range, oldest first."""
    values: dict[str, int]
    total: int
    checks_per_day: float
    last_seen: str | None
    """The last check ever (ISO 8601), or null."""


class PropertyValue(msgspec.Struct):
    """A value seen and how many of the sampled persons or groups had it."""

    name: str
    count: int
