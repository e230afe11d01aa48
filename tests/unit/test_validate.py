"""Every drop rule: the event is answered 200 but not ingested, with a reason to record."""

from __future__ import annotations

from typing import Any

import pytest

from flagstaff.ingest.model import Drop, Envelope, Event
from flagstaff.ingest.normalize import normalize_event
from flagstaff.ingest.validate import (
    HISTORICAL_MIN_AGE_MS,
    MAX_EVENT_BYTES,
    check_event_rules,
    check_historical,
    check_size,
)

NOW = 1_780_000_000_000
HOUR = 3_600_000
REALTIME = Envelope("phc_x", [], False, None)
HISTORICAL = Envelope("phc_x", [], True, None)


def iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


def group(**properties: Any) -> dict[str, Any]:
    return {"event": "$groupidentify", "distinct_id": "u", "properties": properties}


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


DROPS: list[tuple[str, Any, Envelope, str]] = [
    ("item not an object", "just a string", REALTIME, "invalid_event"),
    ("item is a list", [1, 2], REALTIME, "invalid_event"),
    ("no event name", {"distinct_id": "u"}, REALTIME, "missing_event_name"),
    ("null event name", {"event": None, "distinct_id": "u"}, REALTIME, "missing_event_name"),
    ("empty event name", {"event": "", "distinct_id": "u"}, REALTIME, "missing_event_name"),
    ("event name not a string", {"event": 7, "distinct_id": "u"}, REALTIME, "invalid_event"),
    (
        "properties not an object",
        {"event": "e", "distinct_id": "u", "properties": []},
        REALTIME,
        "invalid_event",
    ),
    ("no distinct_id", {"event": "e", "properties": {}}, REALTIME, "missing_distinct_id"),
    (
        "null distinct_ids",
        {"event": "e", "distinct_id": None, "properties": {"distinct_id": None}},
        REALTIME,
        "missing_distinct_id",
    ),
    ("empty distinct_id", {"event": "e", "distinct_id": ""}, REALTIME, "empty_distinct_id"),
    (
        "empty distinct_id in properties",
        {"event": "e", "properties": {"distinct_id": ""}},
        REALTIME,
        "empty_distinct_id",
    ),
    (
        "survey sent without id",
        {"event": "survey sent", "distinct_id": "u"},
        REALTIME,
        "missing_survey_id",
    ),
    (
        "survey shown, empty id",
        {"event": "survey shown", "distinct_id": "u", "properties": {"$survey_id": ""}},
        REALTIME,
        "missing_survey_id",
    ),
    (
        "survey dismissed, null id",
        {"event": "survey dismissed", "distinct_id": "u", "properties": {"$survey_id": None}},
        REALTIME,
        "missing_survey_id",
    ),
    ("group type missing", group(**{"$group_key": "acme"}), REALTIME, "invalid_group_type"),
    (
        "group type not a string",
        group(**{"$group_type": 1, "$group_key": "acme"}),
        REALTIME,
        "invalid_group_type",
    ),
    (
        "group type empty",
        group(**{"$group_type": "", "$group_key": "acme"}),
        REALTIME,
        "invalid_group_type",
    ),
    (
        "group type over 400",
        group(**{"$group_type": "t" * 401, "$group_key": "acme"}),
        REALTIME,
        "invalid_group_type",
    ),
    ("group key missing", group(**{"$group_type": "company"}), REALTIME, "invalid_group_key"),
    (
        "group key a number",
        group(**{"$group_type": "company", "$group_key": 42}),
        REALTIME,
        "invalid_group_key",
    ),
    (
        "group key over 400",
        group(**{"$group_type": "company", "$group_key": "k" * 401}),
        REALTIME,
        "invalid_group_key",
    ),
    (
        "$group_identify spelling",
        {**group(**{"$group_type": "company"}), "event": "$group_identify"},
        REALTIME,
        "invalid_group_key",
    ),
    *[
        (
            f"{name} without profile",
            {
                "event": name,
                "distinct_id": "u",
                "properties": {
                    "$process_person_profile": False,
                    "$group_type": "c",
                    "$group_key": "k",
                    "alias": "a",
                },
            },
            REALTIME,
            "person_event_without_profile",
        )
        for name in (
            "$identify",
            "$create_alias",
            "$merge_dangerously",
            "$groupidentify",
            "$group_identify",
        )
    ],
    (
        "historical without timestamp",
        {"event": "e", "distinct_id": "u"},
        HISTORICAL,
        "historical_missing_timestamp",
    ),
    (
        "historical, invalid timestamp",
        {"event": "e", "distinct_id": "u", "timestamp": "soon"},
        HISTORICAL,
        "historical_missing_timestamp",
    ),
    (
        "historical, 47 hours old",
        {"event": "e", "distinct_id": "u", "timestamp": iso(NOW - 47 * HOUR)},
        HISTORICAL,
        "historical_timestamp_too_recent",
    ),
    (
        "historical, in the future",
        {"event": "e", "distinct_id": "u", "timestamp": iso(NOW + HOUR)},
        HISTORICAL,
        "historical_timestamp_too_recent",
    ),
    (
        "event over 1 MiB",
        {"event": "e", "distinct_id": "u", "properties": {"blob": "x" * MAX_EVENT_BYTES}},
        REALTIME,
        "event_too_large",
    ),
    (
        "nested too deeply to store",
        {"event": "e", "distinct_id": "u", "properties": {"d": deep(300)}},
        REALTIME,
        "invalid_event",
    ),
]


@pytest.mark.parametrize(
    ("raw", "env", "reason"), [c[1:] for c in DROPS], ids=[c[0] for c in DROPS]
)
def test_drop_rules(raw: Any, env: Envelope, reason: str) -> None:
    result = normalize_event(raw, env, now_ms=NOW, ip="203.0.113.9", geoip=None)
    assert isinstance(result, Drop), result
    assert result.reason == reason
    assert result.detail
    assert len(result.digest) == 16
    if isinstance(raw, dict) and isinstance(raw.get("properties"), dict):
        assert "$ip" not in raw["properties"]  # nothing is enriched before the verdict


KEPT: list[tuple[str, Any, Envelope]] = [
    (
        "survey with id",
        {"event": "survey sent", "distinct_id": "u", "properties": {"$survey_id": "s1"}},
        REALTIME,
    ),
    (
        "survey with numeric id",
        {"event": "survey shown", "distinct_id": "u", "properties": {"$survey_id": 12}},
        REALTIME,
    ),
    ("other event without survey id", {"event": "survey answered", "distinct_id": "u"}, REALTIME),
    ("group fields at 400", group(**{"$group_type": "t" * 400, "$group_key": "k" * 400}), REALTIME),
    (
        "anonymous ordinary event",
        {"event": "e", "distinct_id": "u", "properties": {"$process_person_profile": False}},
        REALTIME,
    ),
    (
        "identify with profile",
        {"event": "$identify", "distinct_id": "u", "properties": {"$process_person_profile": True}},
        REALTIME,
    ),
    (
        "historical, 49 hours old",
        {"event": "e", "distinct_id": "u", "timestamp": iso(NOW - 49 * HOUR)},
        HISTORICAL,
    ),
    ("realtime without timestamp", {"event": "e", "distinct_id": "u"}, REALTIME),
    (
        "just under 1 MiB",
        {"event": "e", "distinct_id": "u", "properties": {"blob": "x" * (MAX_EVENT_BYTES - 100)}},
        REALTIME,
    ),
    (
        "distinct_id only in properties",
        {"event": "e", "properties": {"distinct_id": "u"}},
        REALTIME,
    ),
]


@pytest.mark.parametrize(("raw", "env"), [c[1:] for c in KEPT], ids=[c[0] for c in KEPT])
def test_events_that_pass(raw: Any, env: Envelope) -> None:
    assert isinstance(normalize_event(raw, env, now_ms=NOW, ip=None, geoip=None), Event)


def test_rule_functions_directly() -> None:
    assert check_event_rules("clicked", {}, False) is None
    assert check_event_rules("$identify", {}, True) is None
    assert check_historical(NOW - HISTORICAL_MIN_AGE_MS, NOW) is None
    assert check_historical(NOW - HISTORICAL_MIN_AGE_MS + 1, NOW) is not None
    assert check_size(MAX_EVENT_BYTES) is None
    problem = check_size(MAX_EVENT_BYTES + 1)
    assert problem is not None and problem[0] == "event_too_large"
