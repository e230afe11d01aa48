"""The request bodies of flags, cohorts, group types, rollbacks and scheduled changes: decoded
by their Struct (the one the OpenAPI document shows), refused with the codes, details and
attrs the API has always answered."""

from __future__ import annotations

from typing import Any

import pytest

from flagstaff.application import cohorts, people
from flagstaff.application import flags as flag_rules
from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import decode
from tests.stored_flags import stored_flag


def _refusal(call: Any, *args: Any) -> tuple[str, str, str | None]:
    with pytest.raises(ApiError) as refused:
        call(*args)
    assert refused.value.status == 400
    return refused.value.code, refused.value.detail, refused.value.attr


def test_a_flag_body_keeps_its_legacy_fields() -> None:
    flag = flag_rules.flag_from_input({"key": "k", "rollout_percentage": 30, "id": 9})
    assert flag.filters == {"groups": [{"properties": [], "rollout_percentage": 30}]}
    assert not hasattr(flag, "id")  # read-only fields of an export are ignored
    tagged = flag_rules.flag_from_input({"key": "k", "evaluation_tags": ["web"]})
    assert tagged.evaluation_contexts == ["web"]
    named = flag_rules.flag_from_input({"key": "k", "name": None, "evaluation_contexts": None})
    assert named.name == "" and named.evaluation_contexts == []


def test_a_flag_body_is_refused_naming_the_field() -> None:
    assert _refusal(flag_rules.flag_from_input, {"name": "no key"}) == (
        "required",
        "key is required",
        "key",
    )
    assert _refusal(flag_rules.flag_from_input, {"key": "k", "active": "yes"})[2] == "active"
    assert _refusal(flag_rules.flag_from_input, {"key": "k", "filters": []})[2] == "filters"
    rollout = {"key": "k", "filters": {"groups": [{"rollout_percentage": 120}]}}
    assert "rollout" in (_refusal(flag_rules.flag_from_input, rollout)[2] or "")
    assert _refusal(flag_rules.flag_from_input, [1])[1] == "the request body must be a JSON object"


def test_a_patch_keeps_what_it_leaves_out() -> None:
    current = flag_rules.flag_from_input({"key": "k", "name": "before", "tags": ["a"]})
    data = decode(flag_rules.FeatureFlagInput, {"active": False})
    patched = flag_rules.flag_from(data, stored_flag(current, 1, 4))
    assert patched.name == "before" and patched.tags == ["a"]
    assert patched.active is False and patched.key == "k"


def test_rollback_and_scheduled_change_bodies_keep_their_words() -> None:
    assert _refusal(flag_rules.rollback_input, {"version": "2"}) == (
        "required",
        "version (an integer) is required",
        "version",
    )
    assert flag_rules.rollback_input({"version": 2}).version == 2
    schedule = {"payload": {}, "scheduled_at": "2030-01-01T00:00:00Z"}
    assert _refusal(flag_rules.scheduled_change_input, schedule)[:2] == (
        "required",
        "record_id (a feature flag id) is required",
    )
    wrong_model = {**schedule, "record_id": 1, "model_name": "Cohort"}
    assert _refusal(flag_rules.scheduled_change_input, wrong_model)[2] == "model_name"
    assert _refusal(flag_rules.scheduled_change_input, {"record_id": 1, "payload": {}})[2] == (
        "scheduled_at"
    )
    assert flag_rules.scheduled_change_input({**schedule, "record_id": "7"}).record_id == "7"


def test_cohort_and_members_bodies_keep_their_words() -> None:
    assert _refusal(cohorts.cohort_input, {"name": None}) == (
        "invalid_input",
        "must be a string",
        "name",
    )
    assert _refusal(cohorts.cohort_input, {"distinct_ids": [None]})[1:] == (
        "must be a list of distinct ids",
        "distinct_ids",
    )
    static = cohorts.cohort_from(cohorts.cohort_input({"is_static": True, "distinct_ids": [1]}))
    assert static.distinct_ids == ["1"] and static.filters is None
    for body in ({}, {"distinct_ids": []}, {"distinct_ids": "a"}):
        assert _refusal(cohorts.distinct_ids_input, body) == (
            "invalid_input",
            "distinct_ids must be a non-empty list",
            "distinct_ids",
        )
    assert cohorts.distinct_ids_input({"distinct_ids": ["a", 2]}) == ["a", "2"]


@pytest.mark.parametrize(
    ("body", "attr"),
    [
        ({}, "group_type"),
        ({"group_type": ""}, "group_type"),
        ({"group_type": "a\x01"}, "group_type"),
        ({"group_type": "x" * 401}, "group_type"),
        ({"group_type": "a", "group_type_index": 5}, "group_type_index"),
        ({"group_type": "a", "group_type_index": True}, "group_type_index"),
    ],
)
def test_a_group_type_body_keeps_its_words(body: dict[str, Any], attr: str) -> None:
    code, detail, refused = _refusal(people.group_type_input, body)
    assert code == "invalid_input" and refused == attr and detail.startswith(attr + " must be")


def test_a_group_type_body() -> None:
    data = people.group_type_input({"group_type": "company", "group_type_index": 4})
    assert (data.group_type, data.group_type_index) == ("company", 4)


def test_an_event_cursor_reads_back() -> None:
    assert people.parse_event_cursor("1700000000000_12") == (1700000000000, 12)
    for raw in ("nonsense", "1_x", "9" * 30 + "_1"):
        assert _refusal(people.parse_event_cursor, raw)[2] == "cursor"
