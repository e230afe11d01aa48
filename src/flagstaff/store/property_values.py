"""Property values seen on persons and groups, from a bounded sample, the same way on every
engine: each engine counts the JSON text of one property over at most :data:`SAMPLE_ROWS`
rows (a project's newest persons by id, through an index; a group type's first groups by key)
and :func:`value_counts` turns those counts into the values a filter would compare.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

SAMPLE_ROWS = 10_000
"""Rows read per suggestion query, whatever the number of persons."""

_decode = msgspec.json.decode


class ValueCount(msgspec.Struct, frozen=True):
    """A value and how many sampled rows had it (PostHog's ``{"name", "count"}``)."""

    name: str
    count: int


def value_text(value: Any) -> str | None:
    """A property value as a filter's text compares it: strings as they are, ``true``/
    ``false``, numbers as JSON; None for null, lists and objects (nothing to suggest)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return msgspec.json.encode(value).decode()
    return None


def value_counts(rows: Iterable[tuple[str | bytes | None, int]]) -> list[ValueCount]:
    """From (JSON text of the value, rows with it): the values, most frequent first (then by
    name). JSON texts that read as the same value (``"1"`` and ``1``) are added together."""
    counts: dict[str, int] = {}
    for raw, count in rows:
        if raw is None:
            continue
        try:
            text = value_text(_decode(raw))
        except msgspec.DecodeError:
            continue
        if text is not None:
            counts[text] = counts.get(text, 0) + int(count)
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [ValueCount(name, count) for name, count in ordered]


def plain_key(key: str) -> bool:
    """Whether ``key`` can be written in a quoted JSON path label (SQLite's ``$."key"``); other
    keys are looked up by decoding the sampled rows."""
    return not any(c in key for c in '"\\') and all(ord(c) >= 0x20 for c in key)
