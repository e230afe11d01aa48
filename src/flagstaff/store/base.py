"""The storage interface the rest of Flagstaff uses, and the records it returns.

One implementation per engine: :mod:`flagstaff.store.sqlite` and
:mod:`flagstaff.store.postgres`, each a package with its schema, queries and write path.
What both map the same way (rows to records, column lists) is in :mod:`flagstaff.store.rows`,
and what an ingestion batch does between reading and writing in
:mod:`flagstaff.store.ingest_batch`. Above storage, only
:func:`flagstaff.server.services.make_store` (which picks the engine) and ``flagstaff serve``
(which starts the SQLite ingest writer) know which engine is in use.
Flag and cohort definitions are stored as the PostHog JSON objects the management API
accepts, so the flag engine compiles exactly what was stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from flagstaff.activity.records import ChangeSource, Scope, StoredActivity
from flagstaff.activity.rollback import FlagVersion
from flagstaff.activity.scheduled import Operation, ScheduledChange
from flagstaff.ingest.model import Drop, Event
from flagstaff.surveys.early_access import EarlyAccessFeature
from flagstaff.surveys.model import Survey
from flagstaff.surveys.stats import SurveyStats

if TYPE_CHECKING:
    from flagstaff.activity.approvals import ApprovalPolicy, ChangeRequest, RequestStatus
    from flagstaff.activity.webhooks import Delivery, Webhook
    from flagstaff.experiments.exposure import ExperimentTotals
    from flagstaff.experiments.model import ExperimentDefinition, Holdout
    from flagstaff.store.experiment_batch import ExperimentRecord, HoldoutRecord
    from flagstaff.store.flag_usage import DailyChecks, ValueChecks
    from flagstaff.store.property_values import ValueCount
    from flagstaff.store.webhook_rows import ClaimedDelivery


class StoreError(Exception):
    """A storage operation failed in a way the caller can report."""


class Conflict(StoreError):
    """A uniqueness rule would be broken (for example a duplicate active flag key)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    # The conflicts every engine reports, worded once.

    @classmethod
    def project_token_taken(cls) -> Conflict:
        return cls("api_token", "a project with this token already exists")

    @classmethod
    def personal_key_taken(cls) -> Conflict:
        return cls("value", "this personal API key already exists")

    @classmethod
    def flag_key_taken(cls, key: str) -> Conflict:
        return cls("key", f"a feature flag with key {key!r} already exists")

    @classmethod
    def flag_version_stale(cls) -> Conflict:
        return cls("version", "the flag changed meanwhile; read it again and retry")

    @classmethod
    def holdout_in_use(cls, experiments: int) -> Conflict:
        return cls("holdout", f"the holdout is used by {experiments} experiment(s)")

    @classmethod
    def cohort_not_static(cls) -> Conflict:
        return cls("is_static", "only static cohorts have members to add or remove")

    @classmethod
    def last_admin(cls) -> Conflict:
        return cls("role", "a project needs an admin: make another member admin first")


class NotFound(StoreError):
    """The record does not exist in this project."""


class Project(msgspec.Struct, frozen=True):
    id: int
    uuid: str
    name: str
    api_token: str
    created_at: str


class PersonalKey(msgspec.Struct, frozen=True):
    id: int
    project_id: int
    label: str
    mask: str
    created_at: str


class Person(msgspec.Struct):
    id: int
    uuid: str
    properties: dict[str, Any]
    is_identified: bool
    created_at_ms: int
    distinct_ids: list[str]


class Group(msgspec.Struct):
    group_type_index: int
    group_type: str
    group_key: str
    properties: dict[str, Any]
    created_at_ms: int


class Definitions(msgspec.Struct, frozen=True):
    """Everything the flag engine needs for one project, at one version."""

    version: int
    flags: list[dict[str, Any]]
    cohorts: dict[str, dict[str, Any]]
    group_type_mapping: dict[str, str]


class FlagContext(msgspec.Struct):
    """Stored state behind one /flags request: the person and the groups named in it."""

    person_properties: dict[str, Any]
    group_properties: dict[str, dict[str, Any]]
    hash_key_overrides: dict[str, str]
    static_cohort_ids: frozenset[int]
    person_id: int | None


class StoredEvent(msgspec.Struct):
    seq: int
    uuid: str
    event: str
    distinct_id: str
    properties: dict[str, Any]
    timestamp_ms: int
    received_ms: int
    historical: bool
    person_id: int | None
    person_uuid: str | None


class Warning(msgspec.Struct):
    id: int
    type: str
    details: dict[str, Any]
    created_at_ms: int


class PersonRow(msgspec.Struct):
    """A person as a scan over a project's persons reads it (dynamic cohort counts)."""

    id: int
    properties: dict[str, Any]
    static_cohort_ids: frozenset[int]


class Enrolled(msgspec.Struct, frozen=True):
    """Persons enrolled in an early access feature: how many, and a distinct id of the newest."""

    count: int
    distinct_ids: list[str]


class Usage(msgspec.Struct, frozen=True):
    """What a project holds. ``events`` and ``persons`` are counted up to ``cap``: a count
    equal to it means that many or more."""

    events: int
    persons: int
    flags: int
    cohorts: int
    cap: int


class IngestResult(msgspec.Struct):
    ingested: int
    duplicates: int
    dropped: dict[str, int]


class Page(msgspec.Struct):
    count: int
    results: list[Any]


class FlagWrite(msgspec.Struct, frozen=True, kw_only=True):
    """A flag a survey or early access feature save writes in its own transaction.

    ``data`` is the whole flag as the flag API makes it. Without ``flag_id`` the flag is
    created and its id stored on the saved record's field named ``target``
    (``targeting_flag_id``, ``internal_targeting_flag_id``, ``feature_flag_id``); with it, flag
    ``flag_id`` is replaced by ``data`` (``data["version"]`` checked, ``deleted`` honoured).
    """

    data: dict[str, Any]
    flag_id: int | None = None
    target: str | None = None


class SurveysSnapshot(msgspec.Struct, frozen=True):
    """What the public survey and early access lists serve for one project."""

    surveys: list[Survey]
    """Every survey not archived (the caller filters by time and responses)."""
    features: list[EarlyAccessFeature]
    flag_keys: dict[int, str]
    """Key of every flag these name (not deleted)."""
    responses: dict[str, int]
    """``survey sent`` count per survey, for ``responses_limit``."""


class Store(Protocol):
    """Operations grouped by concern. Every write is durable when the awaitable returns."""

    # lifecycle
    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> bool: ...

    # projects and keys
    async def create_project(self, name: str, api_token: str | None = None) -> Project: ...
    async def list_projects(self) -> list[Project]: ...
    async def get_project(self, project_id: int) -> Project | None: ...
    async def get_project_by_token(self, api_token: str) -> Project | None: ...
    async def create_personal_key(
        self, project_id: int, label: str, value: str | None = None
    ) -> tuple[PersonalKey, str]: ...
    async def find_personal_key(self, value: str) -> PersonalKey | None: ...

    # feature flags (PostHog JSON objects)
    async def list_flags(
        self, project_id: int, limit: int, offset: int, include_deleted: bool = False
    ) -> Page: ...
    async def get_flag(self, project_id: int, flag_id: int) -> dict[str, Any] | None: ...
    async def get_flag_by_key(self, project_id: int, key: str) -> dict[str, Any] | None: ...
    # Writes of flags and cohorts record their activity (and a flag's version) in the same
    # transaction, attributed to ``source`` (the system when None).
    async def create_flag(
        self, project_id: int, data: dict[str, Any], source: ChangeSource | None = None
    ) -> dict[str, Any]: ...
    async def update_flag(
        self,
        project_id: int,
        flag_id: int,
        data: dict[str, Any],
        source: ChangeSource | None = None,
    ) -> dict[str, Any]: ...

    # cohorts
    async def list_cohorts(self, project_id: int, limit: int, offset: int) -> Page: ...
    async def get_cohort(self, project_id: int, cohort_id: int) -> dict[str, Any] | None: ...
    async def create_cohort(
        self, project_id: int, data: dict[str, Any], source: ChangeSource | None = None
    ) -> dict[str, Any]: ...
    async def update_cohort(
        self,
        project_id: int,
        cohort_id: int,
        data: dict[str, Any],
        source: ChangeSource | None = None,
    ) -> dict[str, Any]: ...
    async def change_static_members(
        self,
        project_id: int,
        cohort_id: int,
        add: list[str],
        remove: list[str],
        source: ChangeSource | None = None,
    ) -> dict[str, Any]: ...

    # the activity log (newest first) and every flag version's body
    async def list_activity(
        self,
        project_id: int,
        *,
        scope: Scope | None = None,
        item_id: str | None = None,
        user_id: int | None = None,
        before_id: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[StoredActivity]: ...
    async def count_activity(self, project_id: int, scope: Scope, item_id: str | None) -> int: ...
    async def flag_versions(self, project_id: int, flag_id: int) -> list[FlagVersion]: ...

    # scheduled flag changes; a claim marks due ones executed so exactly one worker runs each
    async def create_scheduled_change(
        self,
        project_id: int,
        flag_id: int,
        operation: Operation,
        payload: dict[str, Any],
        run_at_ms: int,
        created_by: int | None,
        now_ms: int,
    ) -> ScheduledChange: ...
    async def list_scheduled_changes(
        self, project_id: int, flag_id: int | None
    ) -> list[ScheduledChange]: ...
    async def delete_scheduled_change(self, project_id: int, change_id: int) -> bool: ...
    async def claim_due_changes(self, now_ms: int, limit: int) -> list[ScheduledChange]: ...
    async def fail_scheduled_change(self, change_id: int, failure: str) -> None: ...
    async def list_static_members(self, project_id: int, cohort_id: int) -> list[str]: ...

    # what /flags reads
    async def definitions_version(self, project_id: int) -> int: ...
    async def definitions(self, project_id: int) -> Definitions: ...
    async def flag_context(
        self,
        project_id: int,
        distinct_id: str,
        groups: dict[int, str],
        *,
        overrides: bool = False,
        static_cohorts: bool = False,
    ) -> FlagContext: ...
    async def add_hash_key_overrides(
        self, project_id: int, distinct_id: str, hash_key: str, flag_keys: list[str]
    ) -> None: ...

    # ingestion
    async def ingest(self, project_id: int, events: list[Event], drops: list[Drop]) -> IngestResult:
        """Events, person and group changes and warnings, durably, in one transaction."""
        ...

    async def listen_definitions(self, callback: Callable[[int | None], None]) -> None:
        """Push definitions changes of any node: ``callback(project_id)``, or None for all.

        Returns once listening. Stores without a push channel return at once and rely on
        the definitions version poll.
        """
        ...

    # read views filled by ingestion
    async def get_person(self, project_id: int, distinct_id: str) -> Person | None: ...
    async def get_group(
        self, project_id: int, group_type_index: int, group_key: str
    ) -> Group | None: ...
    async def list_events(
        self,
        project_id: int,
        *,
        distinct_id: str | None,
        event: str | None,
        after_ms: int | None,
        before_ms: int | None,
        cursor: tuple[int, int] | None,
        limit: int,
    ) -> list[StoredEvent]: ...
    def iter_events(
        self, project_id: int, since_ms: int | None, batch: int = 1000
    ) -> AsyncIterator[list[StoredEvent]]: ...
    async def list_warnings(self, project_id: int, limit: int, offset: int) -> Page:
        """The project's ingestion warnings, newest first (ingestion keeps the newest
        :data:`~flagstaff.store.rows.WARNINGS_KEPT`)."""
        ...

    # what the console's team pages read (store/<engine>/team_store.py)
    async def rename_project(self, project_id: int, name: str) -> Project | None: ...
    async def project_usage(self, project_id: int, cap: int) -> Usage:
        """Counts of the project's data; events and persons counted up to ``cap`` (on
        SQLite in a thread of its own, so a large count does not hold the event loop)."""
        ...

    async def events_per_minute(
        self, project_id: int, start_ms: int, minutes: int, cap: int
    ) -> list[int]:
        """Events by timestamp in each minute from ``start_ms``, each counted up to ``cap``
        (read from the (project, timestamp) index: at most ``minutes * cap`` entries)."""
        ...

    async def scan_persons(
        self, project_id: int, after_id: int, limit: int, static_cohorts: bool
    ) -> list[PersonRow]:
        """Up to ``limit`` persons with an id above ``after_id``, in id order (with their
        static cohorts when asked)."""
        ...

    async def list_groups(
        self, project_id: int, group_type_index: int, search: str, limit: int, offset: int
    ) -> list[Group]:
        """Groups of one type by key, those whose key contains ``search`` (any case)."""
        ...

    async def static_member_sample(self, project_id: int, cohort_id: int, limit: int) -> list[str]:
        """The first ``limit`` distinct ids of a static cohort, in order."""
        ...

    async def list_group_types(self, project_id: int) -> dict[int, str]: ...
    async def create_group_type(self, project_id: int, index: int, name: str) -> bool:
        """Map ``index`` to ``name``; False when so already; Conflict when either is taken."""
        ...

    # flag usage kept by ingestion (store/flag_usage.py), property value suggestions
    async def flag_daily_checks(
        self, project_id: int, since_day: int, keys: list[str]
    ) -> list[DailyChecks]:
        """These flags' checks per UTC day from ``since_day`` on, values added together."""
        ...

    async def flag_value_checks(
        self, project_id: int, flag_key: str, since_day: int
    ) -> list[ValueChecks]:
        """One flag's checks per UTC day and value from ``since_day`` on, by day and value."""
        ...

    async def flag_last_seen(self, project_id: int, keys: list[str]) -> dict[str, int]:
        """The last check ever of each of these flags (never checked: left out)."""
        ...

    async def recompute_flag_usage(self, project_id: int) -> int:
        """Rebuild the project's flag usage from stored events; returns the events read."""
        ...

    async def property_values(
        self, project_id: int, key: str, group_type_index: int | None
    ) -> list[ValueCount]:
        """Values of a person property (or a group type's property) in a bounded sample, most
        frequent first (store/property_values.py)."""
        ...

    # surveys and early access features (saves write their flags in the same transaction)
    async def list_surveys(self, project_id: int, limit: int, offset: int) -> Page:
        """Surveys, newest first (``results`` are :class:`Survey`)."""
        ...

    async def get_survey(self, project_id: int, survey_id: str) -> Survey | None: ...
    async def survey_names(self, project_id: int) -> set[str]: ...
    async def save_survey(
        self,
        project_id: int,
        survey: Survey,
        flags: list[FlagWrite],
        *,
        create: bool,
        source: ChangeSource | None = None,
    ) -> Survey:
        """Write ``flags`` then the survey (with created flag ids set), in one transaction.

        Conflict on ``name`` (another survey has it) or ``key`` (a flag key is taken).
        """
        ...

    async def delete_survey(
        self,
        project_id: int,
        survey_id: str,
        flags: list[FlagWrite],
        *,
        source: ChangeSource | None = None,
    ) -> None:
        """Delete the survey and its aggregate, and write ``flags``, in one transaction."""
        ...

    async def survey_aggregates(
        self, project_id: int, survey_ids: list[str] | None
    ) -> dict[str, SurveyStats]:
        """The counted survey events per survey (None: every survey of the project)."""
        ...

    async def list_early_access_features(self, project_id: int, limit: int, offset: int) -> Page:
        """Features, newest first (``results`` are :class:`EarlyAccessFeature`)."""
        ...

    async def get_early_access_feature(
        self, project_id: int, feature_id: str
    ) -> EarlyAccessFeature | None: ...
    async def early_access_feature_of_flag(self, project_id: int, flag_id: int) -> str | None:
        """The id of the feature linked to flag ``flag_id``, if any."""
        ...

    async def save_early_access_feature(
        self,
        project_id: int,
        feature: EarlyAccessFeature,
        flags: list[FlagWrite],
        *,
        create: bool,
        source: ChangeSource | None = None,
    ) -> EarlyAccessFeature: ...
    async def delete_early_access_feature(
        self,
        project_id: int,
        feature_id: str,
        flags: list[FlagWrite],
        *,
        source: ChangeSource | None = None,
    ) -> None: ...
    async def surveys_snapshot(self, project_id: int) -> SurveysSnapshot: ...
    async def enrolled_persons(self, project_id: int, property_key: str, limit: int) -> Enrolled:
        """Persons whose property ``property_key`` is true (``$feature_enrollment/<flag>``)."""
        ...

    # experiments: definitions, holdouts, and the aggregates ingestion keeps current
    # (store.experiment_batch); every write bumps the definitions version
    async def list_experiments(self, project_id: int, limit: int, offset: int) -> Page: ...
    async def has_experiments(self) -> bool:
        """Whether any project has an experiment (not deleted)."""
        ...

    async def get_experiment(
        self, project_id: int, experiment_id: int
    ) -> ExperimentRecord | None: ...
    async def create_experiment(
        self,
        project_id: int,
        definition: ExperimentDefinition,
        flag: dict[str, Any],
        *,
        source: ChangeSource | None = None,
    ) -> ExperimentRecord:
        """Insert the experiment and, in the same transaction, its flag: ``flag`` without an
        ``id`` is created, with one it is the linked flag, rewritten. A started experiment's
        aggregates are computed from the stored events."""
        ...

    async def update_experiment(
        self,
        project_id: int,
        experiment_id: int,
        definition: ExperimentDefinition,
        *,
        deleted: bool = False,
        flag: dict[str, Any] | None = None,
        source: ChangeSource | None = None,
    ) -> ExperimentRecord:
        """Replace the definition (and rewrite the linked ``flag`` when given), recomputing the
        aggregates when it launches or what counts changed; NotFound when missing."""
        ...

    async def experiment_totals_rows(
        self, experiment_ids: list[int]
    ) -> dict[int, list[tuple[str, bytes]]]:
        """Each experiment's stored (fingerprint, totals) rows, one per writer lane, in one read
        (``experiment_batch.sum_totals`` adds those of the current spec)."""
        ...

    async def experiment_totals(self, experiment_id: int, fingerprint: str) -> ExperimentTotals:
        """The experiment's totals built for its current spec (``fingerprint``)."""
        ...

    async def recompute_experiment(self, project_id: int, experiment_id: int) -> int:
        """Rebuild the aggregates from stored events; returns the events read."""
        ...

    async def list_holdouts(self, project_id: int) -> list[HoldoutRecord]: ...
    async def get_holdout(self, project_id: int, holdout_id: int) -> HoldoutRecord | None: ...
    async def create_holdout(self, project_id: int, holdout: Holdout) -> HoldoutRecord: ...
    async def update_holdout(
        self,
        project_id: int,
        holdout_id: int,
        holdout: Holdout,
        *,
        source: ChangeSource | None = None,
    ) -> HoldoutRecord:
        """Also rewrites ``filters.holdout`` on the flag of every experiment using it."""
        ...

    async def delete_holdout(self, project_id: int, holdout_id: int) -> None:
        """Conflict while an experiment uses it."""
        ...

    # approvals: a project's policy and the flag changes waiting for a second person
    async def approval_policy(self, project_id: int) -> ApprovalPolicy: ...
    async def set_approval_policy(
        self, project_id: int, enabled: bool, source: ChangeSource, now_ms: int
    ) -> ApprovalPolicy: ...
    async def create_change_request(
        self, request: ChangeRequest, flag_key: str, source: ChangeSource
    ) -> ChangeRequest:
        """Store a pending request (its id given by the store) and its activity record."""
        ...

    async def list_change_requests(
        self,
        project_id: int,
        status: RequestStatus | None,
        flag_id: int | None,
        limit: int,
        offset: int,
    ) -> Page:
        """Requests, newest first (``results`` are :class:`ChangeRequest`)."""
        ...

    async def get_change_request(
        self, project_id: int, request_id: int
    ) -> ChangeRequest | None: ...
    async def decide_change_request(
        self,
        decided: ChangeRequest,
        flag_key: str,
        source: ChangeSource,
        apply_source: ChangeSource | None = None,
    ) -> ChangeRequest:
        """Store the decision (Conflict on ``status`` when the request is no longer pending)
        and, with ``apply_source``, carry out its change in the same transaction: an update
        or delete through the flag update path (Conflict on ``version`` when the flag moved),
        a schedule by creating the scheduled change."""
        ...

    # outgoing webhooks: endpoints, and deliveries enqueued with each activity row
    async def create_webhook(self, webhook: Webhook, source: ChangeSource) -> Webhook: ...
    async def list_webhooks(self, project_id: int) -> list[Webhook]: ...
    async def get_webhook(self, project_id: int, webhook_id: int) -> Webhook | None: ...
    async def update_webhook(
        self,
        project_id: int,
        webhook_id: int,
        changes: dict[str, Any],
        source: ChangeSource,
        now_ms: int,
    ) -> Webhook | None: ...
    async def delete_webhook(
        self, project_id: int, webhook_id: int, source: ChangeSource, now_ms: int
    ) -> bool: ...
    async def list_deliveries(
        self, project_id: int, webhook_id: int, limit: int, offset: int
    ) -> Page:
        """Deliveries, newest first (``results`` are :class:`Delivery`)."""
        ...

    async def redeliver(
        self, project_id: int, webhook_id: int, delivery_id: int, now_ms: int
    ) -> Delivery | None: ...
    async def claim_deliveries(
        self, now_ms: int, limit: int, lease_ms: int
    ) -> list[ClaimedDelivery]:
        """Due deliveries, leased to the caller: no other worker or node sends them before
        the lease ends or the outcome is recorded."""
        ...

    async def finish_delivery(self, delivery: Delivery, lease_token: str) -> bool: ...
