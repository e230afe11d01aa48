"""The records and errors the stores return, shared by every engine and the code above them
(:mod:`flagstaff.store.base` re-exports them beside the :class:`~flagstaff.store.base.Store`
protocol)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from flagstaff.common.errors import Conflict as Conflict  # re-exported: the stores' errors
from flagstaff.common.errors import NotFound as NotFound
from flagstaff.common.errors import StoreError as StoreError
from flagstaff.flags.records import FlagDefinition
from flagstaff.surveys.early_access import EarlyAccessFeature
from flagstaff.surveys.model import Survey

if TYPE_CHECKING:
    pass


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


class FlagContext(msgspec.Struct, gc=False):
    """Stored state behind one /flags request: the person and the groups named in it.

    Not tracked by the cyclic collector (it is never part of a cycle): a worker caches tens of
    thousands of them, and each full collection would walk them all."""

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


class EventQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Which events :meth:`~flagstaff.store.base.Store.list_events` lists, newest first by
    timestamp: those of one distinct id, of one name, in a time window; ``cursor`` is the
    (timestamp, seq) of the last row seen."""

    distinct_id: str | None = None
    event: str | None = None
    after_ms: int | None = None
    before_ms: int | None = None
    cursor: tuple[int, int] | None = None
    limit: int = 100


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


# A stored cohort as the management API answers it, and the answer's OpenAPI schema (its
# docstring is the schema's description): the fields of its stored JSON body (name,
# description, filters) and those kept in columns. The flag engine reads cohorts as PostHog's
# JSON objects instead (Definitions.cohorts).
class Cohort(msgspec.Struct, frozen=True):
    """A cohort: dynamic (``filters`` say which persons belong) or static (``count`` distinct
    ids, listed by its ``persons`` route)."""

    id: int
    name: str
    description: str | None
    is_static: bool
    deleted: bool
    filters: dict[str, Any] | None
    """A dynamic cohort's ``{"properties": <property group>}``; null for a static one."""
    version: int
    count: int
    """A static cohort's members (distinct ids); 0 for a dynamic one."""
    created_at: str
    updated_at: str


class CohortDefinition(msgspec.Struct, frozen=True, kw_only=True):
    """A cohort to write, as the cohort use cases checked it. An update writes ``name``,
    ``description``, ``filters`` and ``deleted``; ``is_static`` and ``distinct_ids`` (a
    static cohort's first members) are read on create only."""

    name: str
    description: str | None
    filters: dict[str, Any] | None
    deleted: bool = False
    is_static: bool = False
    distinct_ids: list[str] = msgspec.field(default_factory=list)


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
    """A flag to write in the transaction of another record (a survey, an early access
    feature, an experiment or holdout, an approved change request).

    Without ``flag_id`` ``flag`` is created, and its id is stored on the saved record's field
    named ``target`` (``targeting_flag_id``, ``internal_targeting_flag_id``,
    ``feature_flag_id``); with it, flag ``flag_id`` is replaced by ``flag`` (``deleted``
    honoured), refused if it is no longer at ``version`` (when given).
    """

    flag: FlagDefinition
    flag_id: int | None = None
    version: int | None = None
    target: str | None = None
    created_at: str | None = None
    """Kept from an export on import (else the time of the write)."""


class SurveysSnapshot(msgspec.Struct, frozen=True):
    """What the public survey and early access lists serve for one project."""

    surveys: list[Survey]
    """Every survey not archived (the caller filters by time and responses)."""
    features: list[EarlyAccessFeature]
    flag_keys: dict[int, str]
    """Key of every flag these name (not deleted)."""
    responses: dict[str, int]
    """``survey sent`` count per survey, for ``responses_limit``."""
