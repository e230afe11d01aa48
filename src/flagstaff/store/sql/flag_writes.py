"""Flag writes inside a caller's transaction: the flag API's and those a survey, early
access feature, experiment or approved change request makes together with its own row. Each
is logged (activity record and version row) in the same transaction, whoever made it."""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.common import clock
from flagstaff.flags.records import FeatureFlag, FlagDefinition, flag_json
from flagstaff.store.records import Conflict, FlagWrite, NotFound
from flagstaff.store.rows import FLAG_COLUMNS, flag_body, flag_record
from flagstaff.store.sql.activity import write_change, write_flag_version
from flagstaff.store.sql.db import Row, Tx, UniqueViolation, json_arg


def flag_write_of(body: dict[str, Any], flag_id: int) -> FlagWrite:
    """The write an approved change request makes: its body is the whole flag (validated
    when the request was made) with the version it was based on."""
    flag = msgspec.convert(body, FlagDefinition)
    return FlagWrite(flag=flag, flag_id=flag_id, version=body.get("version"))


async def insert_flag(tx: Tx, project_id: int, write: FlagWrite, now: str) -> Row:
    """Insert the flag (a taken key fails this statement alone); returns its row."""
    key = write.flag.key
    try:
        row = await tx.fetchrow_guarded(
            "INSERT INTO feature_flags (project_id, key, version, deleted, data, "
            f"created_at, updated_at) VALUES ($1, $2, 1, false, $3, $4, $5) "
            f"RETURNING {FLAG_COLUMNS}",
            project_id,
            key,
            json_arg(flag_body(write.flag)),
            write.created_at or now,
            now,
        )
    except UniqueViolation:
        raise Conflict.flag_key_taken(key) from None
    await tx.bump_definitions(project_id)
    assert row is not None
    return row


async def replace_flag(tx: Tx, project_id: int, flag_id: int, write: FlagWrite, now: str) -> Row:
    """Replace flag ``flag_id`` with ``write.flag``, if still at ``write.version`` (when set)."""
    current = await tx.fetchval(
        "SELECT version FROM feature_flags WHERE project_id = $1 AND id = $2 FOR UPDATE",
        project_id,
        flag_id,
    )
    if current is None:
        raise NotFound(f"feature flag {flag_id}")
    if write.version is not None and current != write.version:
        raise Conflict.flag_version_stale()
    flag = write.flag
    try:
        row = await tx.fetchrow_guarded(
            "UPDATE feature_flags SET key = $1, data = $2, deleted = $3, "
            f"version = version + 1, updated_at = $4 WHERE id = $5 "
            f"RETURNING {FLAG_COLUMNS}",
            flag.key,
            json_arg(flag_body(flag)),
            flag.deleted,
            now,
            flag_id,
        )
    except UniqueViolation:
        raise Conflict.flag_key_taken(flag.key) from None
    await tx.bump_definitions(project_id)
    assert row is not None
    return row


async def log_flag(
    tx: Tx,
    project_id: int,
    before: FeatureFlag | None,
    after: FeatureFlag,
    source: ChangeSource | None,
) -> None:
    """The activity record and the version row of a flag write, in its transaction."""
    now_ms = clock.now_ms()
    before_json = None if before is None else flag_json(before)
    after_json = flag_json(after)
    if before_json is not None:  # a flag older than the history: keep the version it replaces
        await write_flag_version(tx, project_id, before_json, None, None, now_ms)
    activity_id = await write_change(
        tx, project_id, Scope.FEATURE_FLAG, after.id, source, before_json, after_json, now_ms
    )
    user_id = source.actor.user_id if source else None
    await write_flag_version(tx, project_id, after_json, activity_id, user_id, now_ms)


async def write_flag(
    tx: Tx, project_id: int, write: FlagWrite, now: str, source: ChangeSource | None
) -> FeatureFlag:
    """Create the flag (no ``write.flag_id``) or replace that flag, and log it; returns the
    flag as stored."""
    if write.flag_id is None:
        after = flag_record(await insert_flag(tx, project_id, write, now))
        await log_flag(tx, project_id, None, after, source)
        return after
    found = await tx.fetchrow(
        f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE project_id = $1 AND id = $2 FOR UPDATE",
        project_id,
        write.flag_id,
    )
    after = flag_record(await replace_flag(tx, project_id, write.flag_id, write, now))
    await log_flag(tx, project_id, flag_record(found) if found else None, after, source)
    return after
