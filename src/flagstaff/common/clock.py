"""The wall clock and the API's time texts, written once.

Times travel as epoch milliseconds; the API shows them as ISO 8601 UTC with ``Z``
(:func:`ms_to_iso`) and reads them from ISO 8601 text, naive meaning UTC (:func:`iso_to_ms`).
Ingestion reads event timestamps more leniently (RFC 2822 too): ``ingest.normalize``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["iso_to_ms", "ms_to_iso", "now_ms", "parse_iso", "utc_iso"]


def now_ms() -> int:
    """Milliseconds since the epoch, now."""
    return int(time.time() * 1000)


def parse_iso(text: str) -> datetime | None:
    """An ISO 8601 date or time (``Z`` or an offset; naive means UTC), or None."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def iso_to_ms(text: str) -> int | None:
    """Epoch milliseconds of an ISO 8601 date or time (naive means UTC), or None."""
    parsed = parse_iso(text)
    return None if parsed is None else int(parsed.timestamp() * 1000)


def ms_to_iso(ms: int) -> str:
    """Epoch milliseconds as the API's times: ISO 8601 UTC with ``Z``, to the millisecond."""
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def utc_iso(moment: datetime) -> str:
    """A moment as the store's ``created_at`` text: UTC with ``Z``, to the microsecond."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def minute_text(moment: datetime | None) -> str:
    """A UTC moment to the minute, for people: ``2026-11-29 14:05 UTC`` ("" for None)."""
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment is not None else ""
