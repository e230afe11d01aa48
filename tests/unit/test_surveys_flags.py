"""The flags a survey maintains, and what posthog-js reads; checked with the flag engine."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import msgspec

from flagstaff.flags import EvalRequest, compile_flags, evaluate, validate_flag
from flagstaff.surveys import flags as survey_flags
from flagstaff.surveys import management, public
from flagstaff.surveys.model import Survey
from flagstaff.surveys.validation import survey_from_input
from tests.stored_flags import stored_flag

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
TARGETING = {"groups": [{"properties": [{"key": "plan", "value": ["pro"], "type": "person"}]}]}


def launched(
    targeting_flag_id: int | None = None,
    internal_targeting_flag_id: int | None = None,
    **extra: Any,
) -> Survey:
    data = {
        "name": "NPS",
        "type": "popover",
        "questions": [{"type": "open", "question": "Why?"}],
        "start_date": "2026-04-01T00:00:00Z",
        **extra,
    }
    survey = survey_from_input(
        data, None, now=NOW, new_id="0190a0b0-0000-7000-8000-000000000001"
    ).survey
    # The flag ids are read-only in a body: the store sets them after creating the flags.
    return msgspec.structs.replace(
        survey,
        targeting_flag_id=targeting_flag_id,
        internal_targeting_flag_id=internal_targeting_flag_id,
    )


def enabled(flag: dict[str, Any], **person: Any) -> bool:
    compiled = compile_flags([{"id": 1, "version": 1, **flag}], {}, {})
    (result,) = evaluate(compiled, EvalRequest(distinct_id="d1", person_properties=person))
    return result.enabled


def test_new_survey_creates_targeting_and_internal_flags() -> None:
    survey = launched()
    changes = survey_flags.plan_save(survey, now=NOW, targeting_flag_filters=TARGETING)
    assert [(c.role, c.action) for c in changes] == [
        ("targeting", "create"),
        ("internal_targeting", "create"),
    ]
    targeting, internal = (c.flag for c in changes)
    assert targeting is not None and internal is not None
    assert re.fullmatch(r"survey-targeting-[0-9a-f]{10}", targeting["key"])
    assert re.fullmatch(r"survey-targeting-[0-9a-f]{10}-custom", internal["key"])
    assert targeting["name"] == internal["name"] == "Targeting flag for survey NPS"
    assert targeting["filters"] == TARGETING and targeting["active"] and internal["active"]
    assert validate_flag(targeting) == [] and validate_flag(internal) == []
    props = [p["key"] for p in internal["filters"]["groups"][0]["properties"]]
    assert props == [f"$survey_dismissed/{survey.id}", f"$survey_responded/{survey.id}"]
    # The engine: the targeting flag follows the person property; the internal flag is on
    # until posthog-js $sets either property.
    assert enabled(targeting, plan="pro") and not enabled(targeting, plan="free")
    assert enabled(internal)
    assert not enabled(internal, **{f"$survey_responded/{survey.id}": True})
    assert not enabled(internal, **{f"$survey_dismissed/{survey.id}": True})


def test_draft_survey_flags_are_inactive_and_follow_launch_and_stop() -> None:
    draft = launched(start_date=None)
    (internal,) = survey_flags.plan_save(draft, now=NOW)
    assert internal.flag is not None and internal.flag["active"] is False
    stored = stored_flag(internal.flag, 5)
    started = msgspec.structs.replace(draft, start_date=NOW, internal_targeting_flag_id=5)
    (update,) = survey_flags.plan_save(started, now=NOW, internal_flag=stored)
    assert (update.action, update.flag_id, update.flag) == ("update", 5, {"active": True})
    running = msgspec.structs.replace(stored, active=True)
    assert survey_flags.plan_save(started, now=NOW, internal_flag=running) == []
    stopped = msgspec.structs.replace(started, end_date=NOW)
    (update,) = survey_flags.plan_save(stopped, now=NOW, internal_flag=running)
    assert update.flag == {"active": False}


def test_targeting_filters_merge_and_removal() -> None:
    survey = launched(targeting_flag_id=3, internal_targeting_flag_id=4)
    internal = stored_flag({"key": "i", "filters": survey_flags.internal_filters(survey)}, 4)
    current = stored_flag({"key": "t", "filters": {**TARGETING, "payloads": {}}}, 3)
    new = {"groups": [{"properties": [{"key": "plan", "value": ["team"], "type": "person"}]}]}
    (update,) = survey_flags.plan_save(
        survey, now=NOW, targeting_flag=current, internal_flag=internal, targeting_flag_filters=new
    )
    assert update.flag == {"filters": {**new, "payloads": {}}}
    (delete,) = survey_flags.plan_save(
        survey, now=NOW, targeting_flag=current, internal_flag=internal, remove_targeting_flag=True
    )
    assert (delete.role, delete.action, delete.flag_id) == ("targeting", "delete", 3)
    assert [(c.role, c.flag_id) for c in survey_flags.plan_delete(survey)] == [
        ("targeting", 3),
        ("internal_targeting", 4),
    ]


def test_recurring_survey_uses_iteration_properties() -> None:
    survey = launched(iteration_count=4, iteration_frequency_days=7)
    assert survey_flags.interaction_property(survey, "responded") == (
        f"$survey_responded/{survey.id}/1"
    )
    internal = stored_flag({"key": "i", "filters": survey_flags.internal_filters(survey)}, 4)
    second = msgspec.structs.replace(survey, current_iteration=2)
    (update,) = survey_flags.plan_save(second, now=NOW, internal_flag=internal)
    keys = [p["key"] for p in update.flag["filters"]["groups"][0]["properties"]]  # type: ignore[index]
    assert keys == [f"$survey_dismissed/{survey.id}/2", f"$survey_responded/{survey.id}/2"]
    # Answering iteration 1 does not hide iteration 2.
    flag = {"key": "k", "active": True, "filters": update.flag["filters"]}  # type: ignore[index]
    assert enabled(flag, **{f"$survey_responded/{survey.id}/1": True})


def test_public_list_has_only_active_surveys_with_flag_keys() -> None:
    running = launched(targeting_flag_id=3, internal_targeting_flag_id=4)
    draft = msgspec.structs.replace(running, id="draft", start_date=None)
    archived = msgspec.structs.replace(running, id="archived", archived=True)
    ended = msgspec.structs.replace(running, id="ended", end_date=NOW)
    full = msgspec.structs.replace(running, id="full", responses_limit=2)
    ending = msgspec.structs.replace(
        running, id="ending", end_date=datetime(2027, 1, 1, tzinfo=UTC)
    )
    keys = {3: "survey-targeting-aaaaaaaaaa", 4: "survey-targeting-aaaaaaaaaa-custom"}
    body = public.surveys_response(
        [running, draft, archived, ended, full, ending], keys, now=NOW, responses={"full": 2}
    )
    assert [s["id"] for s in body["surveys"]] == [running.id, "ending"]
    first = body["surveys"][0]
    assert set(first) == {
        "id", "name", "type", "linked_flag_key", "targeting_flag_key",
        "internal_targeting_flag_key", "questions", "conditions", "appearance", "start_date",
        "end_date", "current_iteration", "current_iteration_start_date", "schedule",
        "enable_partial_responses",
    }  # fmt: skip
    assert first["targeting_flag_key"] == "survey-targeting-aaaaaaaaaa"
    assert first["internal_targeting_flag_key"] == "survey-targeting-aaaaaaaaaa-custom"
    assert first["linked_flag_key"] is None and first["start_date"] == "2026-04-01T00:00:00Z"
    assert body["surveys"][1]["end_date"] is None  # a future end: posthog-js would hide it
    assert body["survey_config"] is None
    assert public.has_active_survey([draft, ended], NOW) is False
    assert public.has_active_survey([draft, running], NOW) is True
    assert public.has_active_survey([full], NOW, {"full": 1}) is True


def test_management_shape_names_every_flag() -> None:
    survey = launched(targeting_flag_id=3, internal_targeting_flag_id=4)
    flags = {
        3: {"id": 3, "key": "survey-targeting-a"},
        4: {"id": 4, "key": "survey-targeting-a-custom"},
    }
    body = management.survey_json(survey, flags)
    assert body["targeting_flag"] == flags[3] and body["internal_targeting_flag"] == flags[4]
    assert body["linked_flag"] is None and body["linked_flag_id"] is None
    assert body["feature_flag_keys"][:3] == [
        {"key": "linked_flag_key", "value": None},
        {"key": "targeting_flag_key", "value": "survey-targeting-a"},
        {"key": "internal_targeting_flag_key", "value": "survey-targeting-a-custom"},
    ]
    assert body["created_at"] == "2026-05-01T12:00:00Z" and body["iteration_start_dates"] == []
    assert msgspec.json.decode(msgspec.json.encode(body)) == body
