"""Flag usage in storage, the same way on every engine: a batch's checks, the records reads
return, and what a recompute adds up.

Each engine keeps ``flag_usage_daily`` (per project, UTC day, flag key and value: checks and
the last check's time) current in the ingest transaction. The checks are found when the batch
is planned (:func:`batch_checks`, a name comparison per event) and counted after the events
are inserted, so a retried event (its uuid already stored) is not counted again: when every
event of the batch was stored, all checks count (:attr:`BatchChecks.tally`, worked out in
advance); otherwise only those whose uuid this transaction inserted
(:meth:`BatchChecks.fresh_tally`). A recompute (:func:`recompute_tally`) adds up the stored
``$feature_flag_called`` events with the same rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgspec
import orjson

from flagstaff.ingest.event_names import FEATURE_FLAG_CALLED
from flagstaff.ingest.flag_usage import Tally, check_of
from flagstaff.ingest.model import Event

RECOMPUTE_CHUNK = 5000
"""Stored events a recompute reads per round trip."""


class Check(NamedTuple):
    uuid: str
    key: str
    value: str
    timestamp_ms: int


class BatchChecks:
    """The flag checks among a batch's kept events, in arrival order."""

    __slots__ = ("_tally", "checks")

    def __init__(self, checks: list[Check]) -> None:
        self.checks = checks
        self._tally: Tally | None = None

    @property
    def uuids(self) -> list[str]:
        return [c.uuid for c in self.checks]

    @property
    def tally(self) -> Tally:
        """Every check counted (the batch stored all its events)."""
        if self._tally is None:
            self._tally = self.fresh_tally(None)
        return self._tally

    def fresh_tally(self, fresh: set[str] | None) -> Tally:
        """The checks whose uuid is in ``fresh`` (None: all), each uuid counted once: a batch
        that repeats a uuid stores its first event only."""
        out = Tally()
        seen: set[str] = set()
        for uuid, key, value, timestamp_ms in self.checks:
            if fresh is not None and uuid not in fresh:
                continue
            if uuid in seen:
                continue
            seen.add(uuid)
            out.add(key, value, timestamp_ms)
        return out


def batch_checks(events: Iterable[Event]) -> BatchChecks | None:
    """The checks among ``events`` (kept, in order); None when there are none."""
    checks = []
    for e in events:
        if e.event == FEATURE_FLAG_CALLED:
            found = check_of(e.event, e.properties)
            if found is not None:
                checks.append(Check(e.uuid, found[0], found[1], e.timestamp_ms))
    return BatchChecks(checks) if checks else None


def recompute_tally(rows: Iterable[Sequence[Any]], into: Tally) -> int:
    """Add up stored ``$feature_flag_called`` events, from (properties JSON, timestamp ms)
    rows, into ``into``; returns how many rows were read."""
    out = into
    read = 0
    for properties, timestamp_ms in rows:
        read += 1
        props = orjson.loads(properties) if isinstance(properties, (bytes, str)) else properties
        if not isinstance(props, dict):
            continue
        found = check_of(FEATURE_FLAG_CALLED, props)
        if found is not None:
            out.add(found[0], found[1], timestamp_ms)
    return read


class DailyChecks(msgspec.Struct, frozen=True, array_like=True):
    """A flag's checks on one day, all values together."""

    flag_key: str
    day: int
    checks: int
    last_seen_ms: int


class ValueChecks(msgspec.Struct, frozen=True, array_like=True):
    """A flag's checks on one day that answered one value."""

    day: int
    value: str
    checks: int
    last_seen_ms: int
