"""What posthog-js reads with the project token: the active surveys and early access features.

``GET /api/surveys/?token=`` answers ``{"surveys": [...], "survey_config": ...}`` with each
survey in PostHog's public shape (``SurveyAPISerializer``: no description, flag keys instead of
flag ids). Only active surveys are listed (started, not ended, not archived, responses_limit
not reached; PostHog lists every unarchived survey and lets posthog-js skip the others, and
stops a survey at its limit with a periodic task). An end date still in the future is served as
``null``: posthog-js hides any survey that has an end date, and the survey leaves this list when
the date passes.

``GET /api/early_access_features/?token=&stage=`` answers ``{"earlyAccessFeatures": [...]}``
in posthog-js's ``EarlyAccessFeature`` shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from flagstaff.surveys.early_access import EarlyAccessFeature
from flagstaff.surveys.model import Survey, format_datetime, is_active


def public_survey(survey: Survey, flag_keys: Mapping[int, str], now: datetime) -> dict[str, Any]:
    """One survey as posthog-js reads it; ``flag_keys`` maps flag id to key."""

    def key(flag_id: int | None) -> str | None:
        return None if flag_id is None else flag_keys.get(flag_id)

    end_date = survey.end_date if survey.end_date is not None and survey.end_date <= now else None
    return {
        "id": survey.id,
        "name": survey.name,
        "type": survey.type,
        "linked_flag_key": key(survey.linked_flag_id),
        "targeting_flag_key": key(survey.targeting_flag_id),
        "internal_targeting_flag_key": key(survey.internal_targeting_flag_id),
        "questions": survey.questions,
        "conditions": survey.conditions,
        "appearance": survey.appearance,
        "start_date": format_datetime(survey.start_date),
        "end_date": format_datetime(end_date),
        "current_iteration": survey.current_iteration,
        "current_iteration_start_date": format_datetime(survey.current_iteration_start_date),
        "schedule": survey.schedule,
        "enable_partial_responses": survey.enable_partial_responses,
    }


def surveys_response(
    surveys: Iterable[Survey],
    flag_keys: Mapping[int, str],
    *,
    now: datetime,
    responses: Mapping[str, int] | None = None,
    survey_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The body of ``GET /api/surveys/``. ``responses``: ``survey sent`` count per survey id
    (``SurveyStats.responses``), for ``responses_limit``."""
    counts = responses or {}
    return {
        "surveys": [
            public_survey(s, flag_keys, now)
            for s in surveys
            if is_active(s, now, counts.get(s.id, 0))
        ],
        "survey_config": survey_config,
    }


def has_active_survey(
    surveys: Iterable[Survey], now: datetime, responses: Mapping[str, int] | None = None
) -> bool:
    """The remote config's ``surveys`` field: true when posthog-js should load surveys."""
    counts = responses or {}
    return any(is_active(s, now, counts.get(s.id, 0)) for s in surveys)


def public_early_access_feature(
    feature: EarlyAccessFeature, flag_keys: Mapping[int, str]
) -> dict[str, Any]:
    flag_key = None if feature.feature_flag_id is None else flag_keys.get(feature.feature_flag_id)
    return {
        "id": feature.id,
        "name": feature.name,
        "description": feature.description,
        "stage": feature.stage,
        "documentationUrl": feature.documentation_url,
        "payload": feature.payload,
        "flagKey": flag_key,
    }


def early_access_response(
    features: Iterable[EarlyAccessFeature], flag_keys: Mapping[int, str], stages: Iterable[str]
) -> dict[str, Any]:
    """The body of ``GET /api/early_access_features/``: the features in ``stages``."""
    wanted = frozenset(stages)
    return {
        "earlyAccessFeatures": [
            public_early_access_feature(f, flag_keys) for f in features if f.stage in wanted
        ]
    }
