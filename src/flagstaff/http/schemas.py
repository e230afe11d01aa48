"""The answers of the routes, as msgspec Structs, for /api/schema/ (request bodies are the
Structs their handlers decode with, in ``application/``, ``http/flags.py`` and ``ingest/body.py``).

These types document the wire format (PostHog's); handlers build their answers with faster
means (pre-encoded fragments, dicts), and the API tests hold both to the same shapes. Fields
whose names are not identifiers (``$anon_distinct_id``) are renamed with ``msgspec.field``.
Where the answer is a store record rendered as is, the record is its schema (a cohort:
:class:`~flagstaff.store.records.Cohort`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.flags.records import FeatureFlag
from flagstaff.store.records import Cohort


class Error(msgspec.Struct):
    """Every error answer: a status code and this body naming the problem."""

    type: str
    code: str
    detail: str
    attr: str | None = None


class Status(msgspec.Struct):
    status: str


# /flags, /decide ----------------------------------------------------------------------------


class FlagReason(msgspec.Struct):
    code: str
    condition_index: int
    description: str | None = None


class FlagMetadata(msgspec.Struct, omit_defaults=True):
    id: int
    version: int
    description: str | None = None
    payload: Any = None


class FlagDetail(msgspec.Struct, omit_defaults=True):
    key: str
    enabled: bool
    reason: FlagReason
    metadata: FlagMetadata
    variant: str | None = None
    failed: bool | None = None


class FlagsResponse(msgspec.Struct, omit_defaults=True):
    """/flags?v=2 (and /decide?v=4): one detailed entry per flag."""

    flags: dict[str, FlagDetail]
    errorsWhileComputingFlags: bool
    requestId: str
    evaluatedAt: int
    quotaLimited: list[str] | None = None


class LegacyFlagsResponse(msgspec.Struct, omit_defaults=True):
    """/flags without v=2, /decide below v=4: values and payloads by key."""

    featureFlags: dict[str, bool | str]
    featureFlagPayloads: dict[str, Any]
    errorsWhileComputingFlags: bool
    requestId: str
    quotaLimited: list[str] | None = None


# local evaluation, remote config ---------------------------------------------------------------


class LocalEvaluationResponse(msgspec.Struct):
    """Flag definitions for the SDKs' local evaluation (answered 304 to a matching ETag)."""

    flags: list[dict[str, Any]]
    group_type_mapping: dict[str, str]
    cohorts: dict[str, Any]


class ClientConfig(msgspec.Struct, omit_defaults=True):
    """posthog-js start-up configuration: /array/<token>/config, or inside config.js."""

    token: str
    supportedCompression: list[str]
    hasFeatureFlags: bool
    config: dict[str, Any] | None = None
    sessionRecording: bool | dict[str, Any] = False
    surveys: bool | list[Any] = False
    heatmaps: bool = False
    siteApps: list[Any] = []


# capture --------------------------------------------------------------------------------------


class CaptureResponse(msgspec.Struct):
    """Sent once the events are durably stored (events dropped by the rules included)."""

    status: int


# management API ---------------------------------------------------------------------------------


class Project(msgspec.Struct):
    id: int
    uuid: str
    name: str
    api_token: str
    created_at: str


class ProjectSettings(Project):
    event_retention_days: int | None
    """Days events (and ingestion warnings) are kept; null keeps them forever."""
    experiment_stats_defaults: dict[str, Any] = msgspec.field(default_factory=dict)
    """The ``stats_config`` fields a new experiment takes when its request leaves them out
    (``sequential``, ``cuped``, ``multiple_testing_correction``...; {}: PostHog's meanings)."""


class CreatedProject(Project):
    """Shown once: a personal API key for the new project."""

    personal_api_key: str


class Person(msgspec.Struct):
    id: str
    uuid: str
    distinct_ids: list[str]
    properties: dict[str, Any]
    is_identified: bool
    created_at: str


class Group(msgspec.Struct):
    group_type_index: int
    group_type: str
    group_key: str
    group_properties: dict[str, Any]
    created_at: str


class GroupType(msgspec.Struct):
    group_type: str
    group_type_index: int
    name_singular: str | None
    name_plural: str | None
    detail_dashboard: int | None
    default_columns: list[str] | None
    created_at: str | None


class StoredEvent(msgspec.Struct):
    id: str
    uuid: str
    event: str
    distinct_id: str
    properties: dict[str, Any]
    timestamp: str
    received_at: str
    historical: bool
    person: dict[str, str] | None


class IngestionWarning(msgspec.Struct):
    id: int
    type: str
    details: dict[str, Any]
    timestamp: str


class Page(msgspec.Struct):
    count: int
    next: str | None
    previous: str | None


class FeatureFlagPage(Page):
    results: list[FeatureFlag]


class CohortPage(Page):
    results: list[Cohort]


class ProjectPage(Page):
    results: list[Project]


class PersonPage(Page):
    results: list[Person]


class DistinctIdPage(Page):
    results: list[str]


class WarningPage(Page):
    results: list[IngestionWarning]


class EventPage(msgspec.Struct):
    next: str | None
    results: list[StoredEvent]


class WebExperimentList(msgspec.Struct):
    """posthog-js's web experiments (none are served yet)."""

    experiments: list[dict[str, Any]]


class ProductTourList(msgspec.Struct):
    """posthog-js's product tours (none are served yet)."""

    product_tours: list[dict[str, Any]]


# experiments ---------------------------------------------------------------------------------
# The definition is experiments.model.ExperimentDefinition (PostHog's fields); the request
# bodies are application.experiments.ExperimentInput and application.holdouts.HoldoutInput.
# The results are experiments.results.ExperimentResults, documented as an object here: that
# module imports scipy, which a worker loads only when results are first asked for.

from flagstaff.experiments.model import ExperimentDefinition  # noqa: E402

ExperimentResults = dict[str, Any]


class ExperimentFlag(msgspec.Struct):
    id: int
    key: str
    name: str
    active: bool
    filters: dict[str, Any]
    deleted: bool
    version: int


class Holdout(msgspec.Struct):
    name: str
    filters: list[dict[str, Any]]
    description: str | None = None
    id: int = 0
    created_at: str = ""
    updated_at: str = ""


class Experiment(ExperimentDefinition):
    id: int = 0
    feature_flag: ExperimentFlag | None = None
    holdout: Holdout | None = None
    created_at: str = ""
    updated_at: str = ""
    deleted: bool = False


class ExperimentPage(Page):
    results: list[Experiment]


class HoldoutPage(Page):
    results: list[Holdout]
