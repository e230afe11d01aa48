"""A survey in the management API's shape (PostHog's ``SurveySerializer``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flagstaff.surveys.model import Survey, format_datetime


def survey_json(
    survey: Survey, flags: Mapping[int, dict[str, Any]], created_by: Any = None
) -> dict[str, Any]:
    """``flags`` maps flag id to the minimal flag the store renders (id, key, name, filters,
    active, deleted...) for the survey's linked, targeting and internal targeting flags."""

    def flag(flag_id: int | None) -> dict[str, Any] | None:
        return None if flag_id is None else flags.get(flag_id)

    def key(flag_id: int | None) -> str | None:
        found = flag(flag_id)
        return None if found is None else found.get("key")

    return {
        "id": survey.id,
        "name": survey.name,
        "description": survey.description,
        "type": survey.type,
        "schedule": survey.schedule,
        "linked_flag": flag(survey.linked_flag_id),
        "linked_flag_id": survey.linked_flag_id,
        "targeting_flag": flag(survey.targeting_flag_id),
        "internal_targeting_flag": flag(survey.internal_targeting_flag_id),
        "questions": survey.questions,
        "conditions": survey.conditions,
        "appearance": survey.appearance,
        "created_at": format_datetime(survey.created_at),
        "created_by": created_by,
        "start_date": format_datetime(survey.start_date),
        "end_date": format_datetime(survey.end_date),
        "archived": survey.archived,
        "responses_limit": survey.responses_limit,
        "feature_flag_keys": [
            {"key": "linked_flag_key", "value": key(survey.linked_flag_id)},
            {"key": "targeting_flag_key", "value": key(survey.targeting_flag_id)},
            {"key": "internal_targeting_flag_key", "value": key(survey.internal_targeting_flag_id)},
            {"key": "internal_response_sampling_flag_key", "value": None},
        ],
        "iteration_count": survey.iteration_count,
        "iteration_frequency_days": survey.iteration_frequency_days,
        "iteration_start_dates": (
            None
            if survey.iteration_start_dates is None
            else [format_datetime(d) for d in survey.iteration_start_dates]
        ),
        "current_iteration": survey.current_iteration,
        "current_iteration_start_date": format_datetime(survey.current_iteration_start_date),
        "enable_partial_responses": survey.enable_partial_responses,
    }
