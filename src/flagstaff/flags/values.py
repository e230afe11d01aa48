"""Conversions of JSON property values shared by the operators.

Strings compare as they are; every other JSON value compares as its compact JSON text
(objects with sorted keys), which is what both the PostHog server and posthog-python do.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_NUMERIC_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _float_text(value: float) -> str:
    if not math.isfinite(value):
        return "null"
    text = repr(value)
    if "e" not in text:
        return text
    mantissa, exponent_text = text.split("e")
    exponent = int(exponent_text)
    if -6 < exponent < 0:
        return format(Decimal(text), "f")
    return f"{mantissa}e{'+' if exponent >= 0 else ''}{exponent}"


def json_text(value: Any) -> str:
    """Compact JSON text of a value (sorted object keys, no ASCII escaping)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(json_text(item) for item in value) + "]"
    if isinstance(value, dict):
        items = (
            f"{json.dumps(str(k), ensure_ascii=False)}:{json_text(value[k])}"
            for k in sorted(value, key=str)
        )
        return "{" + ",".join(items) + "}"
    return json.dumps(str(value), ensure_ascii=False)


def to_text(value: Any) -> str:
    """The string a property value is compared as."""
    if type(value) is str:
        return value
    return json_text(value)


def ascii_lower(text: str) -> str:
    if text.isascii():
        return text.lower()
    return text.translate(ASCII_LOWER)


def is_boolean_like(value: Any) -> bool:
    """True for booleans, "true"/"false" in any case, and lists made only of those."""
    if isinstance(value, bool):
        return True
    if isinstance(value, str):
        return value.lower() in ("true", "false")
    if isinstance(value, list):
        return all(is_boolean_like(item) for item in value)
    return False


def is_truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.lower() == "true"
    if isinstance(value, list):
        return all(is_truthy(item) for item in value)
    return False


def to_number(value: Any) -> float | None:
    """A finite float for numbers and plain numeric strings; None otherwise."""
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            return None
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not _NUMERIC_TEXT.fullmatch(value):
            return None
    elif not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None
