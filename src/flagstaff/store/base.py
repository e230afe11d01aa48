"""The storage interface the rest of Flagstaff uses: the :class:`Store` protocol, and the
records and errors it returns (defined in :mod:`flagstaff.store.records`, re-exported here).

The management features (projects, flags and cohorts, accounts and the activity log,
approvals, webhooks, surveys and early access, experiment definitions) are written once for
both engines in :mod:`flagstaff.store.sql`, whose mixins are part of this protocol; what each
engine writes itself (what ``/flags`` reads, ingestion, the read views ingestion fills, the
team pages' counts, flag usage) is declared below. One package per engine:
:mod:`flagstaff.store.sqlite` and :mod:`flagstaff.store.postgres`. Above storage, only
:func:`flagstaff.server.services.make_store` (which picks the engine) and ``flagstaff serve``
(which starts the SQLite ingest writer) know which engine is in use. Flag and cohort
definitions are stored as the PostHog JSON objects the management API accepts, so the flag
engine compiles exactly what was stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Protocol

from flagstaff.ingest.model import Drop, Event
from flagstaff.store.records import (
    Conflict,
    Definitions,
    Enrolled,
    EventQuery,
    FlagContext,
    FlagWrite,
    Group,
    IngestResult,
    NotFound,
    Page,
    Person,
    PersonalKey,
    PersonRow,
    Project,
    StoredEvent,
    StoreError,
    SurveysSnapshot,
    Usage,
    Warning,
)
from flagstaff.store.retention import RetentionProgress
from flagstaff.store.sql.methods import ManagementMethods

if TYPE_CHECKING:
    from flagstaff.store.flag_usage import DailyChecks, ValueChecks
    from flagstaff.store.property_values import ValueCount

__all__ = [
    "Conflict",
    "Definitions",
    "Enrolled",
    "EventQuery",
    "FlagContext",
    "FlagWrite",
    "Group",
    "IngestResult",
    "NotFound",
    "Page",
    "Person",
    "PersonRow",
    "PersonalKey",
    "Project",
    "Store",
    "StoreError",
    "StoredEvent",
    "SurveysSnapshot",
    "Usage",
    "Warning",
]


class Store(ManagementMethods, Protocol):
    """Operations grouped by concern. Every write is durable when the awaitable returns."""

    # lifecycle
    async def open(self) -> None: ...
    async def close(self) -> None: ...

    # what /flags reads
    async def flag_context(
        self, project_id: int, distinct_id: str, groups: dict[int, str], *,
        overrides: bool = False, static_cohorts: bool = False,
    ) -> FlagContext: ...  # fmt: skip
    def answers_version(self) -> int | None:
        """A number that moves with every commit changing what ``flag_context`` reads
        (persons, distinct ids, groups, overrides, static cohort members), by any process,
        before that commit is acknowledged; None when this store cannot tell (then /flags
        answers are not reused, see ``server/answers.py``)."""
        ...

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
    async def list_events(self, project_id: int, query: EventQuery) -> list[StoredEvent]: ...
    def iter_events(
        self, project_id: int, since_ms: int | None, batch: int = 1000
    ) -> AsyncIterator[list[StoredEvent]]: ...

    # event retention (store/<engine>/retention.py)
    async def get_event_retention(self, project_id: int) -> int | None: ...
    async def set_event_retention(self, project_id: int, days: int | None) -> bool:
        """Keep the project's events ``days`` days (None: forever); False: no such project."""
        ...

    async def retention_pass(self, now_ms: int) -> RetentionProgress | None:
        """Delete expired events (PostgreSQL: one node at a time; None when another runs it,
        and always on SQLite, whose ingest writer process deletes)."""
        ...

    # early access: who opted in (person_enrollments, kept by ingestion)
    async def enrolled_persons(self, project_id: int, flag_key: str, limit: int) -> Enrolled:
        """Persons whose property ``$feature_enrollment/<flag_key>`` is true: how many, and
        a distinct id of each of the newest ``limit``."""
        ...

    async def enrollment_counts(self, project_id: int, flag_keys: list[str]) -> dict[str, int]:
        """Per flag key, how many persons are enrolled (0 for none)."""
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
