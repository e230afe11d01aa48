"""Row and record shapes every engine maps the same way.

Both engines select the columns named here and turn rows into the records of
:mod:`flagstaff.store.base` with these functions. Flag and cohort definitions are stored as
their PostHog JSON object minus the fields kept in columns (:func:`definition_body`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from flagstaff.common.clock import utc_iso
from flagstaff.flags.records import FeatureFlag, FlagDefinition, flag_json
from flagstaff.ingest.groups import MAX_GROUP_TYPES
from flagstaff.ingest.model import Drop
from flagstaff.store.records import (
    Cohort,
    CohortDefinition,
    Conflict,
    Definitions,
    Group,
    StoredEvent,
    Warning,
)

_encode = msgspec.json.encode
_decode = msgspec.json.decode

# Kept in columns, not in a definition's stored JSON body.
COLUMN_FIELDS = frozenset(
    {"id", "key", "version", "deleted", "created_at", "updated_at", "count", "is_static"}
)
PROJECT_COLUMNS = "id, uuid, name, api_token, created_at"
PERSONAL_KEY_COLUMNS = "id, project_id, label, mask, created_at"
FLAG_COLUMNS = "id, key, version, deleted, data, created_at, updated_at"
COHORT_COLUMNS = (
    "id, is_static, deleted, version, data, created_at, updated_at, "
    "(SELECT COUNT(*) FROM cohort_members m WHERE m.cohort_id = cohorts.id)"
)
GROUP_COLUMNS = (
    "g.group_type_index, t.group_type, g.group_key, g.properties, g.created_at_ms "
    "FROM groups g JOIN group_types t ON t.project_id = g.project_id "
    "AND t.group_type_index = g.group_type_index"
)
WARNING_COLUMNS = "id, type, details, created_at_ms"
WARNINGS_KEPT = 1_000
"""Ingestion warnings kept per project: each ingest transaction that adds some deletes those
older than the newest ``WARNINGS_KEPT`` (a walk of that many index entries), so a client
sending only bad events cannot grow the table without bound."""


def now_iso() -> str:
    """The timestamp format of ``created_at``/``updated_at`` columns (UTC, ``Z``)."""
    return utc_iso(datetime.now(UTC))


def json_text(value: Any) -> str:
    return _encode(value).decode()


def definition_body(data: dict[str, Any]) -> dict[str, Any]:
    """What is stored as a flag's or cohort's JSON body."""
    return {k: v for k, v in data.items() if k not in COLUMN_FIELDS}


class CohortBody(msgspec.Struct):
    """What is stored as a cohort's JSON body (the rest is kept in columns)."""

    name: str = ""
    description: str | None = ""
    filters: dict[str, Any] | None = None


_cohort_body_decoder = msgspec.json.Decoder(CohortBody)


def cohort_body(cohort: CohortDefinition) -> CohortBody:
    """The JSON body stored for ``cohort`` (``is_static``, ``deleted`` and the first members
    are columns and rows of their own)."""
    return CohortBody(cohort.name, cohort.description, cohort.filters)


def flag_dict(row: Sequence[Any]) -> dict[str, Any]:
    """A flag as PostHog's JSON, from a row of :data:`FLAG_COLUMNS`: what the flag engine
    reads (:func:`definitions_record`)."""
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


def flag_record(row: Sequence[Any]) -> FeatureFlag:
    """A stored flag, from a row of :data:`FLAG_COLUMNS`."""
    return msgspec.convert(flag_dict(row), FeatureFlag)


def flag_body(flag: FlagDefinition) -> dict[str, Any]:
    """What is stored as a flag's JSON body (the fields not kept in columns)."""
    return definition_body(flag_json(flag))


def cohort_record(row: Sequence[Any]) -> dict[str, Any]:
    """A cohort as the flag engine reads it (PostHog's JSON object, as local evaluation sends
    it), from a row of :data:`COHORT_COLUMNS`; the management side reads :func:`stored_cohort`."""
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


def stored_cohort(row: Sequence[Any]) -> Cohort:
    """A cohort as the management API shows it, from a row of :data:`COHORT_COLUMNS`."""
    cohort_id, is_static, deleted, version, data, created_at, updated_at, count = row
    body = _cohort_body_decoder.decode(data)
    return Cohort(
        id=cohort_id,
        name=body.name,
        description=body.description,
        is_static=bool(is_static),
        deleted=bool(deleted),
        filters=body.filters,
        version=version,
        count=count,
        created_at=created_at,
        updated_at=updated_at,
    )


def definitions_record(
    version: int | None,
    flag_rows: Iterable[Sequence[Any]],
    cohort_rows: Iterable[Sequence[Any]],
    group_type_rows: Iterable[Sequence[Any]],
) -> Definitions:
    """One project's definitions from rows read in one snapshot (flags ordered by key)."""
    cohorts = {str(c["id"]): c for c in (cohort_record(r) for r in cohort_rows)}
    mapping = {str(index): name for index, name in group_type_rows}
    return Definitions(int(version or 0), [flag_dict(r) for r in flag_rows], cohorts, mapping)


def group_record(row: Sequence[Any]) -> Group:
    """A group from a row of :data:`GROUP_COLUMNS`."""
    return Group(row[0], row[1], row[2], _decode(row[3]), row[4])


def event_record(row: Sequence[Any]) -> StoredEvent:
    """A stored event from a row of (seq, uuid, event, distinct_id, properties, timestamp_ms,
    received_ms, historical, person id, person uuid)."""
    r = row
    return StoredEvent(r[0], r[1], r[2], r[3], _decode(r[4]), r[5], r[6], bool(r[7]), r[8], r[9])


def warning_record(row: Sequence[Any]) -> Warning:
    """An ingestion warning from a row of :data:`WARNING_COLUMNS`."""
    return Warning(row[0], row[1], _decode(row[2]), row[3])


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
