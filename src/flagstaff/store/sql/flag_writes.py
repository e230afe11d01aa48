"""Flag writes inside a caller's transaction: the flag API's and those a survey, early
access feature or experiment save makes together with its own row. Each is logged (activity
record and version row) in the same transaction, whoever made it."""

from __future__ import annotations

from typing import Any

from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.common import clock
from flagstaff.store.records import Conflict, NotFound
from flagstaff.store.rows import FLAG_COLUMNS, definition_body, flag_record
from flagstaff.store.sql.activity import write_change, write_flag_version
from flagstaff.store.sql.db import Row, Tx, UniqueViolation, json_arg


async def insert_flag(tx: Tx, project_id: int, data: dict[str, Any], now: str) -> Row:
    """Insert the flag (a taken key fails this statement alone); returns its row."""
    key = data["key"]
    created = data.get("created_at") or now  # an import keeps the exported one
    try:
        row = await tx.fetchrow_guarded(
            "INSERT INTO feature_flags (project_id, key, version, deleted, data, "
            f"created_at, updated_at) VALUES ($1, $2, 1, false, $3, $4, $5) "
            f"RETURNING {FLAG_COLUMNS}",
            project_id,
            key,
            json_arg(definition_body(data)),
            created,
            now,
        )
    except UniqueViolation:
        raise Conflict.flag_key_taken(key) from None
    await tx.bump_definitions(project_id)
    assert row is not None
    return row


async def replace_flag(
    tx: Tx, project_id: int, flag_id: int, data: dict[str, Any], now: str
) -> Row:
    """Replace the flag with ``data``; ``data["version"]`` must be the current version."""
    expected = data.get("version")
    current = await tx.fetchval(
        "SELECT version FROM feature_flags WHERE project_id = $1 AND id = $2 FOR UPDATE",
        project_id,
        flag_id,
    )
    if current is None:
        raise NotFound(f"feature flag {flag_id}")
    if expected is not None and current != expected:
        raise Conflict.flag_version_stale()
    try:
        row = await tx.fetchrow_guarded(
            "UPDATE feature_flags SET key = $1, data = $2, deleted = $3, "
            f"version = version + 1, updated_at = $4 WHERE id = $5 "
            f"RETURNING {FLAG_COLUMNS}",
            data["key"],
            json_arg(definition_body(data)),
            bool(data.get("deleted")),
            now,
            flag_id,
        )
    except UniqueViolation:
        raise Conflict.flag_key_taken(data["key"]) from None
    await tx.bump_definitions(project_id)
    assert row is not None
    return row


async def log_flag(
    tx: Tx,
    project_id: int,
    before: dict[str, Any] | None,
    after: dict[str, Any],
    source: ChangeSource | None,
) -> None:
    """The activity record and the version row of a flag write, in its transaction."""
    now_ms = clock.now_ms()
    if before is not None:  # a flag older than the history: keep the version it replaces
        await write_flag_version(tx, project_id, before, None, None, now_ms)
    activity_id = await write_change(
        tx, project_id, Scope.FEATURE_FLAG, after["id"], source, before, after, now_ms
    )
    user_id = source.actor.user_id if source else None
    await write_flag_version(tx, project_id, after, activity_id, user_id, now_ms)


async def write_flag(
    tx: Tx,
    project_id: int,
    data: dict[str, Any],
    now: str,
    source: ChangeSource | None,
    flag_id: int | None = None,
) -> dict[str, Any]:
    """Create the flag (no ``flag_id``) or replace flag ``flag_id`` with ``data``, and log it;
    returns the flag as stored."""
    if flag_id is None:
        after = flag_record(await insert_flag(tx, project_id, data, now))
        await log_flag(tx, project_id, None, after, source)
        return after
    found = await tx.fetchrow(
        f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE project_id = $1 AND id = $2 FOR UPDATE",
        project_id,
        flag_id,
    )
    after = flag_record(await replace_flag(tx, project_id, flag_id, data, now))  # NotFound
    await log_flag(tx, project_id, flag_record(found) if found else None, after, source)
    return after
