"""Stored flags for the tests' in-memory stores: a written definition as the SQL stores keep
it (its id, its version, no times)."""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.flags.records import FeatureFlag, FlagDefinition, flag_json


def stored_flag(
    flag: FlagDefinition | dict[str, Any], flag_id: int, version: int = 1
) -> FeatureFlag:
    """``flag`` (a definition, or PostHog's JSON of one) stored as flag ``flag_id``."""
    body = flag_json(flag) if isinstance(flag, FlagDefinition) else flag
    fields = {"filters": {}, **body, "id": flag_id, "version": version}
    return msgspec.convert({"created_at": "", "updated_at": "", **fields}, FeatureFlag)
