"""Persons, groups and events: how the API, the console and ``flagstaff events export`` show
them (PostHog's shapes), written once."""

from __future__ import annotations

from typing import Any

from flagstaff.common.clock import ms_to_iso
from flagstaff.store.records import Group, Person, StoredEvent

__all__ = ["event_json", "group_json", "group_type_json", "person_json"]


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


def group_type_json(index: int, name: str) -> dict[str, Any]:
    """PostHog's group type shape; the display metadata it also holds is not kept here."""
    return {
        "group_type": name,
        "group_type_index": index,
        "name_singular": None,
        "name_plural": None,
        "detail_dashboard": None,
        "default_columns": None,
        "created_at": None,
    }
