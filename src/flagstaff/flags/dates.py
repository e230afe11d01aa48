"""Date parsing for the is_date_* operators.

Absolute values are ISO 8601 (naive values are UTC) or epoch seconds; relative values are
``-7d``, ``-2h``, ``-1w``, ``-3m``, ``-1y`` (the minus is optional), counted back from now
with calendar-aware months and years.
"""

from __future__ import annotations

import calendar
import functools
import re
from datetime import UTC, datetime, timedelta
from typing import Any

_RELATIVE = re.compile(r"-?([0-9]+)([hdwmy])")
_YEAR_ONLY = re.compile(r"[0-9]{4}")
_OFFSET_WITH_SPACE = re.compile(r" ([+-][0-9]{2}:[0-9]{2})$")
_MAX_RELATIVE = 10_000
_MIN_EPOCH = -62_135_596_800.0
_MAX_EPOCH = 253_402_300_799.0


class ClockReads:
    """How many times an evaluation compared against the current time (a relative date).

    Evaluation is synchronous, so a caller that reads ``count`` before and after one
    evaluation learns whether its answer depends on the clock (``server/answers.py`` keeps
    such answers only within the second they were computed in, as the relative bounds
    themselves are resolved once a second).
    """

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


CLOCK = ClockReads()


def parse_relative(text: str) -> tuple[int, str] | None:
    """(amount, unit) for a relative date expression, else None."""
    match = _RELATIVE.fullmatch(text)
    if match is None:
        return None
    amount = int(match.group(1))
    if amount >= _MAX_RELATIVE:
        return None
    return amount, match.group(2)


def _months_back(moment: datetime, months: int) -> datetime | None:
    current = moment.year * 12 + moment.month - 1
    target = current - months
    year = target // 12
    if not 1 <= year <= 9999:
        return None
    # Clamp one month at a time: Mar 31 minus 2 months is Jan 28 (through Feb 28).
    day = moment.day
    for index in range(current - 1, target - 1, -1):
        if day <= 28:
            break
        day = min(day, calendar.monthrange(index // 12, index % 12 + 1)[1])
    return moment.replace(year=year, month=target % 12 + 1, day=day)


def _years_back(moment: datetime, years: int) -> datetime | None:
    year = moment.year - years
    if not 1 <= year <= 9999:
        return None
    day = 28 if years > 0 and (moment.month, moment.day) == (2, 29) else moment.day
    return moment.replace(year=year, day=day)


def resolve_relative(amount: int, unit: str, now: datetime) -> datetime | None:
    if unit == "h":
        return now - timedelta(hours=amount)
    if unit == "d":
        return now - timedelta(days=amount)
    if unit == "w":
        return now - timedelta(weeks=amount)
    if unit == "m":
        return _months_back(now, amount)
    return _years_back(now, amount)


def parse_absolute(text: str) -> datetime | None:
    """An aware datetime for ISO 8601 text (naive = UTC), else None."""
    text = text.strip()
    if not text:
        return None
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    elif text.upper().endswith(" UTC"):
        text = text[:-4] + "+00:00"
    elif _YEAR_ONLY.fullmatch(text):
        now = datetime.now(UTC)
        try:
            return datetime(int(text), now.month, now.day, tzinfo=UTC)
        except ValueError:
            return None
    text = _OFFSET_WITH_SPACE.sub(r"\1", text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def from_epoch(seconds: float) -> datetime | None:
    if not _MIN_EPOCH <= seconds <= _MAX_EPOCH:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def parse_property_date(value: object) -> datetime | None:
    """The instant a person or group property value stands for, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return from_epoch(float(value))
    if not isinstance(value, str):
        return None
    parsed = _parse_date_text(value)
    if isinstance(parsed, tuple):
        CLOCK.count += 1
        return resolve_relative(parsed[0], parsed[1], datetime.now(UTC))
    return parsed


@functools.lru_cache(maxsize=16384)
def _parse_date_text(value: str) -> datetime | tuple[Any, ...] | None:
    """Memoised: the same property values recur across persons. Relative dates come back
    unresolved, since their instant depends on the moment of evaluation."""
    try:
        return from_epoch(float(value))
    except ValueError:
        pass
    relative = parse_relative(value)
    if relative is not None:
        return tuple(relative)
    return parse_absolute(value)
