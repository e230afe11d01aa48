"""Which events are dropped, and why: each rule returns a (reason, detail) problem or None.

A dropped event is still answered with 200, as PostHog's capture answers; the reason is recorded
as an ingestion warning. The rule that needs stored state (a sixth group type) is in
``groups.py``, run by the store over the group types it loaded.
"""

from __future__ import annotations

from typing import Any

from flagstaff.common.units import HOUR_MS
from flagstaff.ingest.event_names import GROUP_IDENTIFY_EVENTS, PROFILE_ONLY_EVENTS, SURVEY_EVENTS

__all__ = [
    "EMPTY_DISTINCT_ID",
    "EVENT_TOO_LARGE",
    "HISTORICAL_MIN_AGE_MS",
    "HISTORICAL_MISSING_TIMESTAMP",
    "HISTORICAL_TIMESTAMP_TOO_RECENT",
    "INVALID_EVENT",
    "INVALID_GROUP_KEY",
    "INVALID_GROUP_TYPE",
    "MAX_EVENT_BYTES",
    "MAX_GROUP_FIELD_LENGTH",
    "MISSING_DISTINCT_ID",
    "MISSING_EVENT_NAME",
    "MISSING_SURVEY_ID",
    "PERSON_EVENT_WITHOUT_PROFILE",
    "RULED_EVENTS",
    "Problem",
    "check_distinct_id",
    "check_event_name",
    "check_event_rules",
    "check_historical",
    "check_size",
]

Problem = tuple[str, str]

MISSING_EVENT_NAME = "missing_event_name"
MISSING_DISTINCT_ID = "missing_distinct_id"
EMPTY_DISTINCT_ID = "empty_distinct_id"
MISSING_SURVEY_ID = "missing_survey_id"
INVALID_GROUP_TYPE = "invalid_group_type"
INVALID_GROUP_KEY = "invalid_group_key"
HISTORICAL_TIMESTAMP_TOO_RECENT = "historical_timestamp_too_recent"
HISTORICAL_MISSING_TIMESTAMP = "historical_missing_timestamp"
PERSON_EVENT_WITHOUT_PROFILE = "person_event_without_profile"
EVENT_TOO_LARGE = "event_too_large"
INVALID_EVENT = "invalid_event"

MAX_GROUP_FIELD_LENGTH = 400
MAX_EVENT_BYTES = 1024 * 1024
HISTORICAL_MIN_AGE_MS = 48 * HOUR_MS

RULED_EVENTS = SURVEY_EVENTS | PROFILE_ONLY_EVENTS
"""Names `check_event_rules` has anything to say about; other events skip the call."""


def check_event_name(name: Any) -> Problem | None:
    if name is None or name == "":
        return MISSING_EVENT_NAME, "event has no name"
    if not isinstance(name, str):
        return INVALID_EVENT, f"event name must be a string, not {type(name).__name__}"
    return None


def check_distinct_id(value: Any) -> Problem | None:
    """`value` is the distinct_id as found (None when absent), before stringification."""
    if value is None:
        return MISSING_DISTINCT_ID, "event has no distinct_id"
    if value == "":
        return EMPTY_DISTINCT_ID, "event distinct_id is empty"
    return None


def _group_field_problem(value: Any, field: str, reason: str) -> Problem | None:
    if not isinstance(value, str):
        found = "missing" if value is None else f"a {type(value).__name__}"
        return reason, f"{field} must be a string, but is {found}"
    if not value:
        return reason, f"{field} is empty"
    if len(value) > MAX_GROUP_FIELD_LENGTH:
        return reason, f"{field} is {len(value)} characters long, over {MAX_GROUP_FIELD_LENGTH}"
    return None


def check_event_rules(
    name: str, properties: dict[str, Any], process_person: bool
) -> Problem | None:
    """Person-profile, group identify and survey rules for the events in `RULED_EVENTS`."""
    if not process_person and name in PROFILE_ONLY_EVENTS:
        return (
            PERSON_EVENT_WITHOUT_PROFILE,
            f"{name} with $process_person_profile false cannot update a person or group",
        )
    if name in GROUP_IDENTIFY_EVENTS:
        return _group_field_problem(
            properties.get("$group_type"), "$group_type", INVALID_GROUP_TYPE
        ) or _group_field_problem(properties.get("$group_key"), "$group_key", INVALID_GROUP_KEY)
    if name in SURVEY_EVENTS:
        survey_id = properties.get("$survey_id")
        if survey_id is None or survey_id == "":
            return MISSING_SURVEY_ID, f"{name} event has no $survey_id"
    return None


def check_historical(timestamp_ms: int | None, now_ms: int) -> Problem | None:
    """`timestamp_ms` is None when the event carries no valid ISO 8601 timestamp."""
    if timestamp_ms is None:
        return (
            HISTORICAL_MISSING_TIMESTAMP,
            "historical migration events need an ISO 8601 timestamp",
        )
    if timestamp_ms > now_ms - HISTORICAL_MIN_AGE_MS:
        return (
            HISTORICAL_TIMESTAMP_TOO_RECENT,
            "historical migration events must be dated at least 48 hours before the import",
        )
    return None


def check_size(encoded_bytes: int) -> Problem | None:
    if encoded_bytes > MAX_EVENT_BYTES:
        return (
            EVENT_TOO_LARGE,
            f"event is {encoded_bytes} bytes encoded, over the {MAX_EVENT_BYTES} byte limit",
        )
    return None
