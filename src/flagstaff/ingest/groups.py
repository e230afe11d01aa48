"""Group rules: ``$groupidentify`` upserts and group type indexes. Pure code.

A project has at most :data:`MAX_GROUP_TYPES` group types, numbered 0-4 in order of first
appearance. ``$groups`` on an ordinary event only associates it: it never creates a group.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.common.limits import MAX_GROUP_TYPES
from flagstaff.ingest.event_names import GROUP_IDENTIFY_EVENTS
from flagstaff.ingest.model import Event

# What each drop reason of :func:`apply_group_identify` means, for the ingestion warning.
DROP_DETAILS = {
    "invalid_group_identify": "$group_type and $group_key must be strings",
    "group_type_limit_reached": f"the project already has {MAX_GROUP_TYPES} group types",
}


class GroupState:
    __slots__ = ("created_at_ms", "dirty", "is_new", "key", "properties", "type_index")

    def __init__(
        self,
        type_index: int,
        key: str,
        properties: dict[str, Any],
        created_at_ms: int,
        *,
        is_new: bool = False,
    ) -> None:
        self.type_index = type_index
        self.key = key
        self.properties = properties
        self.created_at_ms = created_at_ms
        self.is_new = is_new
        self.dirty = is_new


class NewGroupType(msgspec.Struct, frozen=True):
    """A group type a batch names for the first time, and the index it was given."""

    index: int
    name: str


class GroupTarget(msgspec.Struct, frozen=True):
    """The group a group identify event upserts."""

    group_type: str
    key: str


class GroupBook:
    """Group types and the groups one batch touches, loaded by the store."""

    def __init__(self, types: dict[str, int], loaded: dict[tuple[int, str], GroupState]) -> None:
        self.types = dict(types)
        self.new_types: list[NewGroupType] = []
        self.groups = dict(loaded)

    def type_index(self, group_type: str) -> int | None:
        """The index of ``group_type``, allocating the lowest free one; None past the limit."""
        index = self.types.get(group_type)
        if index is not None:
            return index
        used = set(self.types.values())
        free = [i for i in range(MAX_GROUP_TYPES) if i not in used]
        if not free:
            return None
        self.types[group_type] = free[0]
        self.new_types.append(NewGroupType(free[0], group_type))
        return free[0]

    def changed(self) -> list[GroupState]:
        return [g for g in self.groups.values() if g.dirty]


def identify_target(event: Event) -> GroupTarget | None:
    """The group a group identify event names, or None for any other event."""
    if event.event not in GROUP_IDENTIFY_EVENTS:
        return None
    props = event.properties
    group_type, group_key = props.get("$group_type"), props.get("$group_key")
    if not isinstance(group_type, str) or not isinstance(group_key, str):
        return None
    return GroupTarget(group_type, group_key)


def apply_group_identify(book: GroupBook, event: Event) -> str | None:
    """Upsert the group named by ``event``; returns a drop reason when it cannot."""
    target = identify_target(event)
    if target is None:
        return "invalid_group_identify"
    group_type, group_key = target.group_type, target.key
    index = book.type_index(group_type)
    if index is None:
        return "group_type_limit_reached"
    updates = event.properties.get("$group_set")
    if not isinstance(updates, dict):
        updates = {}
    state = book.groups.get((index, group_key))
    if state is None:
        state = GroupState(index, group_key, dict(updates), event.timestamp_ms, is_new=True)
        book.groups[(index, group_key)] = state
        return None
    for key, value in updates.items():
        if key not in state.properties or state.properties[key] != value:
            state.properties[key] = value
            state.dirty = True
    return None
