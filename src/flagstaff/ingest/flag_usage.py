"""Flag usage: what a ``$feature_flag_called`` event counts for, and counts added up.

Each such event is one check of the flag named by ``$feature_flag`` on a UTC day, with the
value it had (``$feature_flag_response``: ``true``, ``false``, a variant key). Stores keep a
count and the last check's time per (project, flag key, day, value); a batch's checks are
added up here first (:class:`Tally`), so a batch of many checks of one flag writes one row.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from flagstaff.common.limits import MAX_KEY_LENGTH
from flagstaff.common.units import DAY_MS
from flagstaff.ingest.event_names import (
    FEATURE_FLAG_CALLED,
    FLAG_PROPERTY,
    FLAG_RESPONSE_PROPERTY,
)

USAGE_PROPERTY_KEYS = frozenset({FLAG_PROPERTY, FLAG_RESPONSE_PROPERTY})
"""The event properties the usage rule reads (the SQLite ingest writer is sent these)."""
MAX_VALUE_LENGTH = 200
"""Longer responses are cut: variant keys are short, and a value is part of a row's key."""
NO_RESPONSE = ""
"""The value of a check that sent no ``$feature_flag_response``."""

_json = msgspec.json.encode


def response_text(value: Any) -> str:
    """A flag response as the usage rows keep it: ``true``/``false``, a variant key, or the
    JSON of anything else; :data:`NO_RESPONSE` when absent."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return NO_RESPONSE
    text = value if isinstance(value, str) else _json(value).decode()
    return text[:MAX_VALUE_LENGTH]


def check_of(name: str, properties: Mapping[str, Any]) -> tuple[str, str] | None:
    """(flag key, value) when the event is a check of a flag, else None. A key that could
    not be a flag's (not a string, empty, too long) is not counted."""
    if name != FEATURE_FLAG_CALLED:
        return None
    key = properties.get(FLAG_PROPERTY)
    if type(key) is not str or not key or len(key) > MAX_KEY_LENGTH:
        return None
    return key, response_text(properties.get(FLAG_RESPONSE_PROPERTY))


def day_of(timestamp_ms: int) -> int:
    """The UTC day of a time: days since 1970-01-01."""
    return timestamp_ms // DAY_MS


CellKey = tuple[str, int, str]
"""(flag key, day, value)."""


class Tally:
    """Checks added up per (flag key, day, value): a count and the latest check's time."""

    __slots__ = ("cells",)

    def __init__(self) -> None:
        self.cells: dict[CellKey, list[int]] = {}

    def add(self, key: str, value: str, timestamp_ms: int, checks: int = 1) -> None:
        cell_key = (key, timestamp_ms // DAY_MS, value)
        cell = self.cells.get(cell_key)
        if cell is None:
            self.cells[cell_key] = [checks, timestamp_ms]
        else:
            cell[0] += checks
            if timestamp_ms > cell[1]:
                cell[1] = timestamp_ms

    def rows(self) -> list[tuple[str, int, str, int, int]]:
        """(flag key, day, value, checks, last check ms), sorted by key, day and value (the
        order rows are locked in, so concurrent writers cannot deadlock)."""
        return [(k, d, v, c[0], c[1]) for (k, d, v), c in sorted(self.cells.items())]

    def __len__(self) -> int:
        return len(self.cells)


def tally(checks: Iterable[tuple[str, str, int]]) -> Tally:
    """The :class:`Tally` of (flag key, value, timestamp ms) checks."""
    out = Tally()
    for key, value, timestamp_ms in checks:
        out.add(key, value, timestamp_ms)
    return out
