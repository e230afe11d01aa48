"""Cohorts: their bodies as PostHog writes them (:class:`CohortInput` from JSON,
:class:`CohortCsvInput` from the CSV upload's form; shaped and checked once by
:func:`cohort_from` into the store's :class:`~flagstaff.store.records.CohortDefinition`),
their writes, and the members of static cohorts. The use cases return the store's
:class:`~flagstaff.store.records.Cohort` records, which the adapters render with
:func:`cohort_json`.

A dynamic cohort's ``filters.properties`` is a property group (``AND``/``OR`` of property
filters or nested groups); each leaf filter is judged by the flag rules, as a flag condition
would be. A static cohort has no filters: its members are distinct ids."""

from __future__ import annotations

from typing import Annotated, Any, Protocol

import msgspec

from flagstaff.activity.records import ChangeSource
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, existing
from flagstaff.application.inputs import UNSET, UnsetType, given
from flagstaff.application.wording import decode_worded
from flagstaff.flags import validate_flag
from flagstaff.store.records import Cohort, CohortDefinition, Page

__all__ = [
    "CohortCsvInput",
    "CohortInput",
    "CohortReads",
    "CohortStore",
    "DistinctIds",
    "MemberSampleReads",
    "add_members",
    "cohort_from",
    "cohort_input",
    "cohort_json",
    "cohorts_page",
    "create_cohort",
    "csv_cohort_input",
    "delete_cohort",
    "distinct_ids_input",
    "existing_cohort",
    "find_cohort",
    "list_cohorts",
    "list_members",
    "member_sample",
    "remove_members",
    "update_cohort",
    "upload_members",
]


class CohortInput(msgspec.Struct):
    """A cohort to create, or the fields to change (PATCH: ``is_static`` and ``distinct_ids``
    are read on create only)."""

    name: str | UnsetType = UNSET
    description: str | UnsetType | None = UNSET
    is_static: bool | UnsetType = UNSET
    filters: dict[str, Any] | UnsetType | None = UNSET
    """A dynamic cohort's ``{"properties": <property group>}``."""
    distinct_ids: list[str | int] | UnsetType = UNSET
    """A static cohort's first members."""
    deleted: bool | UnsetType = UNSET


_COHORT_WORDING = {
    "name": ("invalid_input", "must be a string"),
    "distinct_ids": ("invalid_input", "must be a list of distinct ids"),
}


def cohort_input(body: Any) -> CohortInput:
    return decode_worded(CohortInput, body, _COHORT_WORDING)


class DistinctIds(msgspec.Struct):
    distinct_ids: Annotated[list[str | int], msgspec.Meta(min_length=1)]


def distinct_ids_input(body: Any) -> list[str]:
    """The distinct ids of a members body, as strings."""
    data = decode_worded(
        DistinctIds,
        body,
        {"distinct_ids": ("invalid_input", "distinct_ids must be a non-empty list")},
    )
    return [str(d) for d in data.distinct_ids]


class CohortCsvInput(msgspec.Struct, omit_defaults=True):
    """A static cohort from a CSV file (``multipart/form-data``). The file's first column holds
    distinct ids, one per row, or the column headed ``distinct_id``; at most 200,000 ids and
    10 MB. On PATCH the ids are added to the static cohort."""

    csv: Annotated[str, msgspec.Meta(extra_json_schema={"format": "binary"})] | UnsetType = UNSET
    """The CSV file (its text, once read as UTF-8)."""
    name: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    is_static: bool | UnsetType = UNSET


def csv_cohort_input(form: CohortCsvInput, distinct_ids: list[str] | None) -> CohortInput:
    """The cohort body an upload's form stands for: its fields, and with a CSV (its
    ``distinct_ids``), a static cohort of those ids."""
    fields = given(form)
    fields.pop("csv", None)
    if distinct_ids is not None:
        fields.update(is_static=True, distinct_ids=list(distinct_ids))
    return CohortInput(**fields)


def _as_written(current: Cohort) -> CohortDefinition:
    """The stored cohort as an update writes it back, unchanged."""
    return CohortDefinition(
        name=current.name,
        description=current.description,
        filters=current.filters,
        deleted=current.deleted,
        is_static=current.is_static,
    )


def cohort_from(data: CohortInput, current: Cohort | None = None) -> CohortDefinition:
    """The full cohort a create (``current`` None) or PATCH body asks for, validated."""
    body = given(data)
    if current is None:
        base = CohortDefinition(
            name="",
            description="",
            filters=None,
            is_static=body.get("is_static", False),
            distinct_ids=[str(d) for d in body.get("distinct_ids", [])],
        )
    else:
        base = _as_written(current)
    changes = {k: body[k] for k in ("name", "description", "filters", "deleted") if k in body}
    cohort = msgspec.structs.replace(base, **changes)
    if cohort.is_static:
        return msgspec.structs.replace(cohort, filters=None)
    filters = cohort.filters
    if not isinstance(filters, dict) or "properties" not in filters:
        raise ApiError(
            400,
            "invalid_input",
            "a dynamic cohort needs filters.properties, a property group",
            "filters",
        )
    problem = _property_group_problem(filters["properties"], "filters.properties")
    if problem is not None:
        raise ApiError(400, "invalid_input", problem[1], problem[0])
    return cohort


def _property_group_problem(group: Any, path: str) -> tuple[str, str] | None:
    if not isinstance(group, dict):
        return path, "must be a property group object"
    if group.get("type") not in ("AND", "OR"):
        return f"{path}.type", "must be AND or OR"
    values = group.get("values")
    if not isinstance(values, list):
        return f"{path}.values", "must be a list"
    for i, value in enumerate(values):
        where = f"{path}.values[{i}]"
        if not isinstance(value, dict):
            return where, "must be an object"
        if "values" in value:
            problem = _property_group_problem(value, where)
            if problem is not None:
                return problem
            continue
        # A leaf property filter: let the flag validator judge it inside a one-condition flag.
        probe = {
            "key": "cohort-check",
            "filters": {"groups": [{"properties": [value], "rollout_percentage": 100}]},
        }
        errors = validate_flag(probe)
        if errors:
            return where, errors[0][1]
    return None


# use cases ----------------------------------------------------------------------------------


class CohortReads(Protocol):
    """The project's cohorts, as they are."""

    async def list_cohorts(self, project_id: int, limit: int, offset: int) -> Page: ...

    async def get_cohort(self, project_id: int, cohort_id: int) -> Cohort | None: ...


class MemberSampleReads(Protocol):
    """The first distinct ids of a static cohort."""

    async def static_member_sample(
        self, project_id: int, cohort_id: int, limit: int
    ) -> list[str]: ...


class CohortStore(CohortReads, Protocol):
    """What the cohort use cases read and write."""

    async def create_cohort(
        self, project_id: int, cohort: CohortDefinition, source: ChangeSource | None = None
    ) -> Cohort: ...

    async def update_cohort(
        self, project_id: int, cohort_id: int, cohort: CohortDefinition,
        source: ChangeSource | None = None,
    ) -> Cohort: ...  # fmt: skip

    async def list_static_members(self, project_id: int, cohort_id: int) -> list[str]: ...

    async def change_static_members(
        self, project_id: int, cohort_id: int, add: list[str], remove: list[str],
        source: ChangeSource | None = None,
    ) -> Cohort: ...  # fmt: skip


def cohort_json(cohort: Cohort) -> dict[str, Any]:
    """The cohort in PostHog's shape (the API's answer)."""
    return msgspec.to_builtins(cohort)


async def cohorts_page(store: CohortReads, project_id: int, limit: int, offset: int) -> Page:
    """A page of the project's cohorts (:class:`Cohort` records), newest first."""
    return await store.list_cohorts(project_id, limit, offset)


async def find_cohort(store: CohortReads, project_id: int, cohort_id: int) -> Cohort | None:
    """The project's cohort ``cohort_id`` as stored, if any."""
    return await store.get_cohort(project_id, cohort_id)


async def member_sample(
    store: MemberSampleReads, project_id: int, cohort_id: int, limit: int
) -> list[str]:
    """The first ``limit`` distinct ids of a static cohort, in order."""
    return await store.static_member_sample(project_id, cohort_id, limit)


async def list_cohorts(caller: Caller[CohortStore], limit: int, offset: int) -> Page:
    """A page of the project's cohorts (:class:`Cohort` records), newest first."""
    return await cohorts_page(caller.store, caller.project_id, limit, offset)


async def existing_cohort(caller: Caller[CohortStore], cohort_id: int) -> Cohort:
    """The project's cohort ``cohort_id``; 404 when it has none."""
    return existing(await find_cohort(caller.store, caller.project_id, cohort_id), "cohort")


async def create_cohort(caller: Caller[CohortStore], data: CohortInput) -> Cohort:
    cohort = cohort_from(data)
    return await caller.store.create_cohort(caller.project_id, cohort, caller.source)


async def update_cohort(caller: Caller[CohortStore], current: Cohort, data: CohortInput) -> Cohort:
    """A PATCH: the fields given change, the others stay."""
    cohort = cohort_from(data, current)
    return await caller.store.update_cohort(caller.project_id, current.id, cohort, caller.source)


async def upload_members(
    caller: Caller[CohortStore],
    current: Cohort,
    form: CohortCsvInput,
    distinct_ids: list[str] | None,
) -> Cohort:
    """A PATCH by the CSV upload's form: its fields change (``is_static`` is not one), then
    the CSV's distinct ids (None: no file) join the cohort, which must be static."""
    if not current.is_static and distinct_ids is not None:
        raise ApiError(400, "invalid_input", "only a static cohort takes a CSV", "csv")
    changes = csv_cohort_input(msgspec.structs.replace(form, is_static=UNSET), None)
    if given(changes):
        current = await update_cohort(caller, current, changes)
    if distinct_ids:
        current = await caller.store.change_static_members(
            caller.project_id, current.id, distinct_ids, [], caller.source
        )
    return current


async def delete_cohort(caller: Caller[CohortStore], current: Cohort) -> None:
    """Mark the cohort deleted."""
    cohort = msgspec.structs.replace(_as_written(current), deleted=True)
    await caller.store.update_cohort(caller.project_id, current.id, cohort, caller.source)


async def list_members(caller: Caller[CohortStore], cohort: Cohort) -> list[str]:
    """A static cohort's distinct ids."""
    return await caller.store.list_static_members(caller.project_id, cohort.id)


async def add_members(
    caller: Caller[CohortStore], cohort: Cohort, distinct_ids: list[str]
) -> Cohort:
    return await caller.store.change_static_members(
        caller.project_id, cohort.id, distinct_ids, [], caller.source
    )


async def remove_members(
    caller: Caller[CohortStore], cohort: Cohort, distinct_ids: list[str]
) -> Cohort:
    return await caller.store.change_static_members(
        caller.project_id, cohort.id, [], distinct_ids, caller.source
    )
