"""Record shapes every engine builds the same way from its rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from flagstaff.ingest.model import Drop
from flagstaff.store.base import Conflict

_decode = msgspec.json.decode

# Kept in columns, not in a definition's stored JSON body.
COLUMN_FIELDS = frozenset(
    {"id", "key", "version", "deleted", "created_at", "updated_at", "count", "is_static"}
)
FLAG_COLUMNS = "id, key, version, deleted, data, created_at, updated_at"
COHORT_COLUMNS = (
    "id, is_static, deleted, version, data, created_at, updated_at, "
    "(SELECT COUNT(*) FROM cohort_members m WHERE m.cohort_id = cohorts.id)"
)


def definition_body(data: dict[str, Any]) -> dict[str, Any]:
    """What is stored as a flag's or cohort's JSON body."""
    return {k: v for k, v in data.items() if k not in COLUMN_FIELDS}


def flag_record(row: Sequence[Any]) -> dict[str, Any]:
    """A flag as the API shows it, from a row of :data:`FLAG_COLUMNS`."""
    flag_id, key, version, deleted, data, created_at, updated_at = row
    flag: dict[str, Any] = _decode(data)
    flag.update(
        id=flag_id,
        key=key,
        version=version,
        deleted=bool(deleted),
        created_at=created_at,
        updated_at=updated_at,
    )
    return flag


def cohort_record(row: Sequence[Any]) -> dict[str, Any]:
    """A cohort as the API shows it, from a row of :data:`COHORT_COLUMNS`."""
    cohort_id, is_static, deleted, version, data, created_at, updated_at, count = row
    cohort: dict[str, Any] = _decode(data)
    cohort.update(
        id=cohort_id,
        is_static=bool(is_static),
        deleted=bool(deleted),
        version=version,
        created_at=created_at,
        updated_at=updated_at,
        count=count,
    )
    return cohort


def warning_details(drop: Drop) -> dict[str, Any]:
    """The details stored with the ingestion warning of a dropped event."""
    return {
        "reason": drop.reason,
        "detail": drop.detail,
        "eventUuid": drop.uuid,
        "digest": drop.digest,
        "event": drop.event,
        "distinct_id": drop.distinct_id,
    }


MAX_GROUP_TYPES = 5
"""Group type indexes run from 0 to 4, as in PostHog."""


def group_type_change(existing: dict[int, str], index: int, name: str) -> bool:
    """Whether mapping ``index`` to ``name`` adds a group type: False when it exists already.

    Raises :class:`Conflict` when the index or the name is taken by another mapping, since
    flags and stored groups refer to a type by its index.
    """
    if not 0 <= index < MAX_GROUP_TYPES:
        raise Conflict("group_type_index", f"group_type_index must be 0-{MAX_GROUP_TYPES - 1}")
    if existing.get(index) == name:
        return False
    if index in existing:
        raise Conflict(
            "group_type_index", f"group type index {index} is already {existing[index]!r}"
        )
    for other, other_name in existing.items():
        if other_name == name:
            raise Conflict("group_type", f"group type {name!r} already has index {other}")
    return True
