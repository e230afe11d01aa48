"""Persons, groups, group types, events and ingestion warnings: how the API, the console and
``flagstaff events export`` show them (PostHog's shapes), written once, and the use cases that
read them or map a group type. The use cases return records; their callers render them with
the ``*_json`` functions here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Protocol

import msgspec

from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, existing
from flagstaff.application.wording import decode_worded
from flagstaff.common.clock import ms_to_iso
from flagstaff.common.limits import MAX_GROUP_TYPES
from flagstaff.store.records import (
    EventQuery,
    Group,
    Page,
    Person,
    PersonRow,
    StoredEvent,
    Usage,
    Warning,
)

__all__ = [
    "CountReads",
    "EventsPage",
    "GroupPage",
    "GroupType",
    "GroupTypeInput",
    "MappedGroupType",
    "PeopleReads",
    "PeopleStore",
    "PersonScan",
    "WarningPage",
    "create_group_type",
    "event_cursor",
    "event_json",
    "events_page",
    "events_per_minute",
    "find_group",
    "find_person",
    "group_json",
    "group_type_input",
    "group_type_json",
    "group_type_names",
    "list_group_types",
    "list_groups",
    "list_warnings",
    "matching_groups",
    "newest_events",
    "parse_event_cursor",
    "person_json",
    "persons_after",
    "project_usage",
    "stored_group",
    "stored_person",
    "warning_json",
    "warnings_page",
]


def event_json(e: StoredEvent) -> dict[str, Any]:
    return {
        "id": e.uuid,
        "uuid": e.uuid,
        "event": e.event,
        "distinct_id": e.distinct_id,
        "properties": e.properties,
        "timestamp": ms_to_iso(e.timestamp_ms),
        "received_at": ms_to_iso(e.received_ms),
        "historical": e.historical,
        "person": {"uuid": e.person_uuid} if e.person_uuid else None,
    }


def person_json(person: Person) -> dict[str, Any]:
    return {
        "id": person.uuid,
        "uuid": person.uuid,
        "distinct_ids": person.distinct_ids,
        "properties": person.properties,
        "is_identified": person.is_identified,
        "created_at": ms_to_iso(person.created_at_ms),
    }


def group_json(group: Group) -> dict[str, Any]:
    return {
        "group_type_index": group.group_type_index,
        "group_type": group.group_type,
        "group_key": group.group_key,
        "group_properties": group.properties,
        "created_at": ms_to_iso(group.created_at_ms),
    }


class GroupType(msgspec.Struct, frozen=True):
    """A group type: its index (0-4) and name."""

    index: int
    name: str


def group_type_json(group_type: GroupType) -> dict[str, Any]:
    """PostHog's group type shape; the display metadata it also holds is not kept here."""
    return {
        "group_type": group_type.name,
        "group_type_index": group_type.index,
        "name_singular": None,
        "name_plural": None,
        "detail_dashboard": None,
        "default_columns": None,
        "created_at": None,
    }


def warning_json(w: Warning) -> dict[str, Any]:
    return {
        "id": w.id,
        "type": w.type,
        "details": w.details,
        "timestamp": ms_to_iso(w.created_at_ms),
    }


# group types --------------------------------------------------------------------------------


class GroupTypeInput(msgspec.Struct):
    group_type: Annotated[str, msgspec.Meta(pattern=r"^[^\x00-\x1f]{1,400}$")]
    """The group type's name: 1-400 printable characters."""
    group_type_index: Annotated[int, msgspec.Meta(ge=0, lt=MAX_GROUP_TYPES)] | None = None
    """Its index, 0-4 (left out: the next free one)."""


_GROUP_TYPE_WORDING = {
    "group_type": ("invalid_input", "group_type must be 1-400 printable characters"),
    "group_type_index": (
        "invalid_input",
        f"group_type_index must be an integer 0-{MAX_GROUP_TYPES - 1}",
    ),
}


def group_type_input(body: Any) -> GroupTypeInput:
    return decode_worded(GroupTypeInput, body, _GROUP_TYPE_WORDING)


# use cases ----------------------------------------------------------------------------------


class PeopleReads(Protocol):
    """What the persons, groups, group types, events and warnings views read."""

    async def get_person(self, project_id: int, distinct_id: str) -> Person | None: ...

    async def get_group(
        self, project_id: int, group_type_index: int, group_key: str
    ) -> Group | None: ...

    async def list_group_types(self, project_id: int) -> dict[int, str]: ...

    async def list_events(self, project_id: int, query: EventQuery) -> list[StoredEvent]: ...

    async def list_warnings(self, project_id: int, limit: int, offset: int) -> Page: ...

    async def list_groups(
        self, project_id: int, group_type_index: int, search: str, limit: int, offset: int
    ) -> list[Group]: ...


class PeopleStore(PeopleReads, Protocol):
    """The views' reads, and the group type mapping's write."""

    async def create_group_type(self, project_id: int, index: int, name: str) -> bool: ...


class CountReads(Protocol):
    """The counts the console's settings and live events pages show."""

    async def project_usage(self, project_id: int, cap: int) -> Usage: ...

    async def events_per_minute(
        self, project_id: int, start_ms: int, minutes: int, cap: int
    ) -> list[int]: ...


class PersonScan(Protocol):
    """The persons in id order (what counting a dynamic cohort's members walks)."""

    async def scan_persons(
        self, project_id: int, after_id: int, limit: int, static_cohorts: bool
    ) -> list[PersonRow]: ...


async def stored_person(store: PeopleReads, project_id: int, distinct_id: str) -> Person | None:
    """The person behind ``distinct_id``, if any."""
    return await store.get_person(project_id, distinct_id)


async def stored_group(store: PeopleReads, project_id: int, index: int, key: str) -> Group | None:
    """The group of type ``index`` with that key, if any."""
    return await store.get_group(project_id, index, key)


async def group_type_names(store: PeopleReads, project_id: int) -> dict[int, str]:
    """The project's group type names by index."""
    return await store.list_group_types(project_id)


async def matching_groups(
    store: PeopleReads, project_id: int, index: int, search: str, limit: int, offset: int
) -> list[Group]:
    """Up to ``limit`` groups of type ``index`` by key from ``offset``, those whose key
    contains ``search`` (any case)."""
    return await store.list_groups(project_id, index, search, limit, offset)


async def newest_events(
    store: PeopleReads, project_id: int, query: EventQuery
) -> list[StoredEvent]:
    """The events ``query`` selects, newest first, at most ``query.limit``."""
    return await store.list_events(project_id, query)


async def warnings_page(store: PeopleReads, project_id: int, limit: int, offset: int) -> Page:
    """How many ingestion warnings the project has, and one page of them, newest first."""
    return await store.list_warnings(project_id, limit, offset)


async def project_usage(store: CountReads, project_id: int, cap: int) -> Usage:
    """Counts of the project's data; events and persons counted up to ``cap``."""
    return await store.project_usage(project_id, cap)


async def events_per_minute(
    store: CountReads, project_id: int, start_ms: int, minutes: int, cap: int
) -> list[int]:
    """Events by timestamp in each minute from ``start_ms``, each counted up to ``cap``."""
    return await store.events_per_minute(project_id, start_ms, minutes, cap)


class EventExport(Protocol):
    def iter_events(
        self, project_id: int, since_ms: int | None, batch: int = 1000
    ) -> AsyncIterator[list[StoredEvent]]: ...


def exported_events(
    store: EventExport, project_id: int, since_ms: int | None
) -> AsyncIterator[list[StoredEvent]]:
    """The project's stored events from ``since_ms`` (all: None), oldest first, in batches
    (``flagstaff events export``)."""
    return store.iter_events(project_id, since_ms, 1000)


async def persons_after(
    store: PersonScan, project_id: int, after_id: int, limit: int, static_cohorts: bool
) -> list[PersonRow]:
    """Up to ``limit`` persons with an id above ``after_id``, in id order (with their static
    cohorts when ``static_cohorts``)."""
    return await store.scan_persons(project_id, after_id, limit, static_cohorts)


async def find_person(caller: Caller[PeopleStore], distinct_id: str) -> Person | None:
    """The person behind ``distinct_id``, if any."""
    return await stored_person(caller.store, caller.project_id, distinct_id)


async def find_group(caller: Caller[PeopleStore], index: int, key: str) -> Group:
    """The group of type ``index`` with that key; a 404 when there is none."""
    return existing(await stored_group(caller.store, caller.project_id, index, key), "group")


MAX_GROUP_SEARCH = 400


class GroupPage(msgspec.Struct, frozen=True):
    """One page of a group type's groups by key, and whether a next page exists."""

    groups: list[Group]
    more: bool


async def list_groups(
    caller: Caller[PeopleStore], index: int, search: str, limit: int, offset: int
) -> GroupPage:
    """Up to ``limit`` groups of type ``index`` by key from ``offset``, those whose key
    contains ``search`` (any case)."""
    if len(search) > MAX_GROUP_SEARCH:
        raise ApiError(
            400, "invalid_input", f"search has at most {MAX_GROUP_SEARCH} characters", "search"
        )
    rows = await matching_groups(caller.store, caller.project_id, index, search, limit + 1, offset)
    return GroupPage(rows[:limit], len(rows) > limit)


async def list_group_types(caller: Caller[PeopleStore]) -> list[GroupType]:
    """The project's group types by index."""
    types = await group_type_names(caller.store, caller.project_id)
    return [GroupType(i, name) for i, name in sorted(types.items())]


class MappedGroupType(msgspec.Struct, frozen=True):
    """A group type :func:`create_group_type` mapped, and whether the mapping is new."""

    group_type: GroupType
    created: bool


async def create_group_type(caller: Caller[PeopleStore], data: GroupTypeInput) -> MappedGroupType:
    """Map a group type name to an index (the one given, else the one it has, else the next
    free one)."""
    name, index = data.group_type, data.group_type_index
    types = await caller.store.list_group_types(caller.project_id)
    if index is None:
        index = next((i for i, n in types.items() if n == name), None)
    if index is None:
        index = next((i for i in range(MAX_GROUP_TYPES) if i not in types), MAX_GROUP_TYPES)
        if index == MAX_GROUP_TYPES:
            raise ApiError(
                400, "invalid_input", f"a project has at most {MAX_GROUP_TYPES} group types"
            )
    created = await caller.store.create_group_type(caller.project_id, index, name)
    return MappedGroupType(GroupType(index, name), created)


# events and warnings ------------------------------------------------------------------------

_MAX_CURSOR_PART = 2**63 - 1


def event_cursor(event: StoredEvent) -> str:
    """The opaque cursor of the page after ``event``."""
    return f"{event.timestamp_ms}_{event.seq}"


def parse_event_cursor(raw: str) -> tuple[int, int]:
    """(timestamp, seq) of a cursor :func:`event_cursor` gave; a 400 otherwise."""
    try:
        ts, seq = raw.split("_", 1)
        cursor = (int(ts), int(seq))
        if not all(abs(part) <= _MAX_CURSOR_PART for part in cursor):
            raise ValueError(raw)
    except ValueError:
        raise ApiError(400, "invalid_input", "cursor is not one this API gave", "cursor") from None
    return cursor


class EventsPage(msgspec.Struct, frozen=True):
    """One page of events, newest first, and the cursor of the next page (None: this is the
    last)."""

    events: list[StoredEvent]
    cursor: str | None


async def events_page(caller: Caller[PeopleStore], query: EventQuery) -> EventsPage:
    """One page of events, newest first (at most ``query.limit``), and the cursor of the next
    page."""
    rows = await newest_events(
        caller.store, caller.project_id, msgspec.structs.replace(query, limit=query.limit + 1)
    )
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    return EventsPage(rows, event_cursor(rows[-1]) if more else None)


class WarningPage(msgspec.Struct, frozen=True):
    """How many warnings the project has, and one page of them, newest first."""

    count: int
    warnings: list[Warning]


async def list_warnings(caller: Caller[PeopleStore], limit: int, offset: int) -> WarningPage:
    """How many warnings the project has and one page of them, newest first."""
    page = await warnings_page(caller.store, caller.project_id, limit, offset)
    return WarningPage(page.count, list(page.results))
