"""Response shapes of the survey and early access routes, for the OpenAPI document (as
:mod:`flagstaff.http.schemas` for the rest). Questions, conditions and appearance are PostHog's
JSON objects, kept as sent. The request bodies are the use cases' own Structs
(``application.surveys.SurveyInput``, ``application.early_access.EarlyAccessFeatureInput``),
which decode them."""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.http.schemas import Page


class MinimalFlag(msgspec.Struct):
    """A flag a survey or feature links to or maintains."""

    id: int
    key: str
    name: str
    filters: dict[str, Any]
    active: bool
    deleted: bool
    ensure_experience_continuity: bool


class FlagKey(msgspec.Struct):
    key: str
    value: str | None


class Survey(msgspec.Struct):
    id: str
    name: str
    description: str
    type: str
    schedule: str | None
    linked_flag: MinimalFlag | None
    linked_flag_id: int | None
    targeting_flag: MinimalFlag | None
    internal_targeting_flag: MinimalFlag | None
    questions: list[dict[str, Any]]
    conditions: dict[str, Any] | None
    appearance: dict[str, Any] | None
    created_at: str | None
    created_by: Any
    start_date: str | None
    end_date: str | None
    archived: bool
    responses_limit: int | None
    feature_flag_keys: list[FlagKey]
    iteration_count: int | None
    iteration_frequency_days: int | None
    iteration_start_dates: list[str] | None
    current_iteration: int | None
    current_iteration_start_date: str | None
    enable_partial_responses: bool | None


class SurveyPage(Page):
    results: list[Survey]


class EventStats(msgspec.Struct):
    total_count: int
    unique_persons: int
    first_seen: str | None
    last_seen: str | None
    unique_persons_only_seen: int
    total_count_only_seen: int


class SurveyRates(msgspec.Struct):
    response_rate: float
    dismissal_rate: float
    unique_users_response_rate: float
    unique_users_dismissal_rate: float


class SurveyStats(msgspec.Struct):
    """``stats`` by event: ``survey shown``, ``survey dismissed``, ``survey sent``."""

    stats: dict[str, EventStats]
    rates: SurveyRates
    survey_id: str
    start_date: str | None
    end_date: str | None


class AllSurveyStats(msgspec.Struct):
    stats: dict[str, EventStats]
    rates: SurveyRates
    survey_count: int


class SurveySummary(msgspec.Struct):
    """Per question: ``response_count``; choices and ``open_choice_count`` (choice questions),
    ``distribution``/``average``/``nps`` (ratings), ``open_answers`` (a page, newest first)."""

    survey_id: str
    responses: int
    questions: list[dict[str, Any]]


class EarlyAccessFeature(msgspec.Struct):
    id: str
    feature_flag: MinimalFlag | None
    name: str
    description: str
    stage: str
    documentation_url: str
    payload: Any
    created_at: str | None


class EarlyAccessFeaturePage(Page):
    results: list[EarlyAccessFeature]


class PublicSurveyList(msgspec.Struct):
    """Active surveys as posthog-js reads them (flag keys instead of ids)."""

    surveys: list[dict[str, Any]]
    survey_config: dict[str, Any] | None


class PublicEarlyAccessFeature(msgspec.Struct):
    id: str
    name: str
    description: str
    stage: str
    documentationUrl: str
    payload: Any
    flagKey: str | None


class PublicEarlyAccessFeatureList(msgspec.Struct):
    earlyAccessFeatures: list[PublicEarlyAccessFeature]
