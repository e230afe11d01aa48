"""Event uuids: keep a valid client uuid in canonical form, else mint a UUIDv7."""

from __future__ import annotations

import re
import uuid
from typing import Any

import uuid_utils

__all__ = ["canonical_uuid", "new_uuid7"]

_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").fullmatch
_uuid7 = uuid_utils.uuid7


def canonical_uuid(value: Any) -> str | None:
    """The lowercase hyphenated form of a uuid string, or None when `value` is not one."""
    if not isinstance(value, str):
        return None
    if len(value) == 36 and _CANONICAL(value) is not None:
        return value
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def new_uuid7() -> str:
    """A fresh UUIDv7 (time-ordered, from the current clock)."""
    return str(_uuid7())
