"""Event retention, per project: the setting and what both engines' deletion shares.

A project keeps its events (and ingestion warnings) for ``event_retention_days`` days, or
forever when it is None (the default). Deletion runs in the background in bounded steps: on
SQLite in the ingest writer process (``store/sqlite/retention.py``), on PostgreSQL in one
node at a time (``store/postgres/retention.py``). Persons, groups and the experiment, survey
and flag usage aggregates are kept.
"""

from __future__ import annotations

import msgspec

from flagstaff.common.units import DAY_MS

MAX_RETENTION_DAYS = 36_500
"""A hundred years: the longest retention accepted (use null for forever)."""


class RetentionPolicy(msgspec.Struct, frozen=True):
    """One project whose events expire."""

    project_id: int
    days: int

    def cutoff_ms(self, now_ms: int) -> int:
        """Events with a timestamp before this are expired."""
        return now_ms - self.days * DAY_MS


class RetentionProgress(msgspec.Struct):
    """What one pass removed (for logs and tests)."""

    events: int = 0
    warnings: int = 0
    partitions_dropped: int = 0
    done: bool = True
    """False while expired rows remain (the pass stopped after its bounded steps)."""


def retention_problem(value: object) -> str | None:
    """Why ``value`` is not a valid ``event_retention_days``, or None (null is valid)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return "event_retention_days must be a whole number of days, or null to keep forever"
    if not 1 <= value <= MAX_RETENTION_DAYS:
        return f"event_retention_days must be between 1 and {MAX_RETENTION_DAYS}, or null"
    return None
