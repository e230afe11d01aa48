"""Survey bodies: PostHog's validation rules, question ids, iterations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import decode, given
from flagstaff.application.surveys import SurveyInput
from flagstaff.surveys import model
from flagstaff.surveys.validation import (
    FULL_ROLLOUT_MESSAGE,
    LinkedFlag,
    SurveyContext,
    SurveyInvalid,
    survey_from_input,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def body(**extra: Any) -> dict[str, Any]:
    return {
        "name": "NPS",
        "type": "popover",
        "questions": [
            {"type": "rating", "question": "How likely?", "scale": 10},
            {"type": "single_choice", "question": "Why?", "choices": ["Price", "Speed"]},
        ],
        **extra,
    }


def errors_of(data: Any, current: model.Survey | None = None, **kw: Any) -> list[tuple[str, str]]:
    with pytest.raises(SurveyInvalid) as info:
        survey_from_input(data, current, now=NOW, **kw)
    return info.value.errors


def test_create_assigns_uuid_question_ids_and_dates() -> None:
    saved = survey_from_input(body(start_date="2026-05-01T10:00:00Z"), None, now=NOW).survey
    ids = [q["id"] for q in saved.questions]
    assert len(set(ids)) == 2 and all(len(i) == 36 for i in ids)
    assert saved.start_date == datetime(2026, 5, 1, 10, tzinfo=UTC)
    assert saved.created_at == NOW and saved.archived is False
    assert saved.iteration_start_dates == [] and saved.current_iteration is None


def test_question_ids_are_kept_across_edits() -> None:
    first = survey_from_input(body(), None, now=NOW).survey
    ids = [q["id"] for q in first.questions]
    # A client that sends the ids back keeps them; one that drops them keeps them too when
    # the question at that position has the same type.
    echoed = survey_from_input({"questions": first.questions}, first, now=NOW).survey
    assert [q["id"] for q in echoed.questions] == ids
    dropped = [{k: v for k, v in q.items() if k != "id"} for q in first.questions]
    again = survey_from_input({"questions": dropped}, first, now=NOW).survey
    assert [q["id"] for q in again.questions] == ids
    # A different question type at a position gets a new id.
    changed = [dropped[0], {"type": "open", "question": "Anything else?"}]
    third = survey_from_input({"questions": changed}, first, now=NOW).survey
    assert third.questions[0]["id"] == ids[0] and third.questions[1]["id"] not in ids


def test_required_fields_and_types() -> None:
    errors = dict(errors_of({"questions": "nope"}))
    assert errors["name"] == errors["type"] == "This field is required."
    assert errors["questions"] == "Questions must be a list of objects"
    # the types of the fields are SurveyInput's: decoding refuses them, naming the field
    for field, value in (("type", "modal"), ("archived", "yes"), ("schedule", "daily")):
        with pytest.raises(ApiError) as info:
            decode(SurveyInput, {field: value})
        assert (info.value.status, info.value.code, info.value.attr) == (
            400,
            "invalid_input",
            field,
        )
    with pytest.raises(ApiError) as info:
        decode(SurveyInput, [1])
    assert info.value.detail == "the request body must be a JSON object"
    # fields it does not know (read-only ones of a PostHog export) are ignored
    assert given(decode(SurveyInput, {"name": "x", "id": "s1", "created_by": {}})) == {"name": "x"}


@pytest.mark.parametrize(
    ("question", "path", "message"),
    [
        ({"type": "open", "question": ""}, "questions[0].question", "Question text is required"),
        ({"type": "poll", "question": "q"}, "questions[0].type", "Must be one of"),
        ({"type": "rating", "question": "q", "scale": 4}, "questions[0].scale", "Must be one"),
        (
            {"type": "rating", "question": "q", "scale": 10, "display": "emoji"},
            "questions[0].display",
            "Emoji ratings",
        ),
        ({"type": "single_choice", "question": "q", "choices": []}, "questions[0].choices", "non"),
        (
            {"type": "multiple_choice", "question": "q", "choices": ["a", " "]},
            "questions[0].choices",
            "non-empty",
        ),
        (
            {"type": "link", "question": "q", "link": "http://x.test"},
            "questions[0].link",
            "Link must be a URL with one of these schemes: [https, mailto]",
        ),
        (
            {"type": "link", "question": "q", "link": "mailto:nobody"},
            "questions[0].link",
            "Invalid mailto link",
        ),
        (
            {"type": "open", "question": "q", "optional": "no"},
            "questions[0].optional",
            "Must be a boolean.",
        ),
        (
            {
                "type": "open",
                "question": "q",
                "branching": {"type": "specific_question", "index": 5},
            },
            "questions[0].branching.index",
            "Must be a question index",
        ),
        (
            {"type": "open", "question": "q", "branching": {"type": "response_based"}},
            "questions[0].branching.type",
            "Response-based branching needs",
        ),
    ],
)
def test_question_errors_name_the_field(question: dict[str, Any], path: str, message: str) -> None:
    found = dict(errors_of(body(questions=[question, {"type": "open", "question": "x"}])))
    assert path in found, found
    assert message in found[path]


def test_branching_that_is_valid() -> None:
    questions = [
        {
            "type": "single_choice",
            "question": "Pick",
            "choices": ["a", "b"],
            "branching": {"type": "response_based", "responseValues": {"0": 2, "1": "end"}},
        },
        {
            "type": "rating",
            "question": "Rate",
            "scale": 5,
            "branching": {"type": "response_based", "responseValues": {"negative": 2}},
        },
        {"type": "open", "question": "Why?", "branching": {"type": "end"}},
    ]
    saved = survey_from_input(body(questions=questions), None, now=NOW).survey
    assert saved.questions[0]["branching"]["responseValues"] == {"0": 2, "1": "end"}
    bad = [dict(questions[1], branching={"type": "response_based", "responseValues": {"x": 1}})]
    found = dict(errors_of(body(questions=[*bad, questions[2]])))
    assert "questions[0].branching.responseValues.x" in found


def test_conditions_and_linked_flag_variant() -> None:
    flag = LinkedFlag(id=7, key="beta", variants=("control", "test"))
    ctx = SurveyContext(linked_flag=flag)
    conditions = {
        "url": "/pricing",
        "urlMatchType": "icontains",
        "selector": "#buy",
        "deviceTypes": ["Mobile"],
        "deviceTypesMatchType": "exact",
        "seenSurveyWaitPeriodInDays": 14,
        "events": {"repeatedActivation": True, "values": [{"name": "purchase"}]},
        "linkedFlagVariant": "test",
    }
    saved = survey_from_input(
        body(linked_flag_id=7, conditions=conditions), None, now=NOW, context=ctx
    )
    assert saved.survey.linked_flag_id == 7 and saved.survey.conditions == conditions
    found = dict(
        errors_of(
            body(linked_flag_id=7, conditions={**conditions, "linkedFlagVariant": "x"}), context=ctx
        )
    )
    assert found["conditions.linkedFlagVariant"] == (
        "Feature flag variant 'x' does not exist. Available variants: control, test"
    )
    found = dict(errors_of(body(conditions={"linkedFlagVariant": "test"})))
    assert "can only be used when a linked_flag_id" in found["conditions.linkedFlagVariant"]
    assert dict(errors_of(body(linked_flag_id=8), context=ctx))["linked_flag_id"] == (
        "Feature Flag with this ID does not exist"
    )
    found = dict(
        errors_of(body(conditions={"urlMatchType": "starts", "seenSurveyWaitPeriodInDays": -1}))
    )
    assert "conditions.urlMatchType" in found and "conditions.seenSurveyWaitPeriodInDays" in found


def test_targeting_filters_are_flag_filters_and_not_everyone() -> None:
    everyone = {"groups": [{"properties": [], "rollout_percentage": 100}]}
    assert ("targeting_flag_filters", FULL_ROLLOUT_MESSAGE) in errors_of(
        body(targeting_flag_filters=everyone)
    )
    broken = {"groups": [{"properties": [{"key": "plan", "operator": "bogus", "value": 1}]}]}
    found = dict(errors_of(body(targeting_flag_filters=broken)))
    assert "targeting_flag_filters.groups[0].properties[0].operator" in found
    good = {"groups": [{"properties": [{"key": "plan", "value": ["pro"], "type": "person"}]}]}
    saved = survey_from_input(body(targeting_flag_filters=good), None, now=NOW)
    assert saved.targeting_flag_filters == good and saved.remove_targeting_flag is False


def test_names_are_unique_per_project() -> None:
    ctx = SurveyContext(other_names=frozenset({"NPS"}))
    assert ("name", "There is already a survey with this name.") in errors_of(body(), context=ctx)


def test_iterations_follow_posthogs_rules() -> None:
    start = "2026-05-01T00:00:00Z"
    saved = survey_from_input(
        body(start_date=start, iteration_count=3, iteration_frequency_days=30), None, now=NOW
    ).survey
    assert saved.current_iteration == 1
    assert saved.iteration_start_dates == [
        datetime(2026, 5, 1, tzinfo=UTC) + timedelta(days=30 * k) for k in range(3)
    ]
    later = model.advance_iteration(saved, datetime(2026, 6, 5, tzinfo=UTC))
    assert later.current_iteration == 2
    assert later.current_iteration_start_date == datetime(2026, 5, 31, tzinfo=UTC)
    assert model.advance_iteration(saved, datetime(2027, 1, 1, tzinfo=UTC)) is saved
    # Lowering the count below the running iteration is refused, as PostHog refuses it.
    found = dict(errors_of({"iteration_count": 1}, msgspec.structs.replace(later)))
    assert found["iteration_count"].startswith("Cannot change survey recurrence to 1")
    assert "iteration_frequency_days" in dict(errors_of(body(iteration_count=2)))
    assert "iteration_count" in dict(
        errors_of(body(iteration_count=501, iteration_frequency_days=1))
    )
    # Not launched yet: no start dates.
    draft = survey_from_input(body(iteration_count=2, iteration_frequency_days=7), None, now=NOW)
    assert draft.survey.iteration_start_dates is None


def test_patch_keeps_other_fields_and_put_replaces() -> None:
    first = survey_from_input(
        body(description="d", responses_limit=10, appearance={"backgroundColor": "#fff"}),
        None,
        now=NOW,
    ).survey
    patched = survey_from_input({"archived": True}, first, now=NOW).survey
    assert patched.archived and patched.description == "d" and patched.responses_limit == 10
    assert patched.id == first.id and patched.created_at == first.created_at
    replaced = survey_from_input(body(), first, now=NOW, partial=False).survey
    assert replaced.description == "" and replaced.responses_limit is None
    assert replaced.id == first.id and replaced.created_at == first.created_at
    assert "name" in dict(errors_of({"type": "api"}, first, partial=False))


def test_dates_limits_and_external_surveys() -> None:
    found = dict(errors_of(body(start_date="tomorrow", responses_limit=0)))
    assert "start_date" in found
    found = dict(errors_of(body(responses_limit=0)))
    assert found["responses_limit"] == "Must be a positive integer or null."
    found = dict(errors_of(body(start_date="2026-05-02", end_date="2026-05-01")))
    assert found["end_date"] == "Must not be before start_date."
    found = dict(errors_of(body(type="external_survey", conditions={"url": "/x"})))
    assert found["conditions"].endswith("not allowed for external surveys: url")


def test_put_forgets_the_linked_flag_a_patch_keeps() -> None:
    ctx = SurveyContext(linked_flag=LinkedFlag(id=7, key="beta", variants=("test",)))
    first = survey_from_input(
        body(linked_flag_id=7, conditions={"linkedFlagVariant": "test"}), None, now=NOW, context=ctx
    ).survey
    kept = survey_from_input({"name": "NPS 2"}, first, now=NOW, context=ctx).survey
    assert kept.linked_flag_id == 7 and kept.conditions == {"linkedFlagVariant": "test"}
    put = survey_from_input(body(), first, now=NOW, partial=False).survey
    assert put.linked_flag_id is None and put.conditions is None
