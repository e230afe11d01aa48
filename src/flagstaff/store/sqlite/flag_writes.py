"""Flag writes inside a caller's transaction: the flag API's and those a survey or early
access feature save makes together with its own row."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.store.base import Conflict, NotFound
from flagstaff.store.rows import FLAG_COLUMNS, definition_body, flag_record, json_text
from flagstaff.store.sqlite.accounts import write_change, write_flag_version


def bump_definitions(conn: sqlite3.Connection, project_id: int) -> None:
    """Every worker's caches re-read the project's definitions (and surveys) on this change."""
    conn.execute(
        "INSERT INTO definitions_version (project_id, version) VALUES (?, 1) "
        "ON CONFLICT(project_id) DO UPDATE SET version = version + 1",
        (project_id,),
    )


def insert_flag(conn: sqlite3.Connection, project_id: int, data: dict[str, Any], now: str) -> int:
    key = data["key"]
    created = data.get("created_at") or now  # an import keeps the exported one
    try:
        cur = conn.execute(
            "INSERT INTO feature_flags (project_id, key, version, deleted, data, "
            "created_at, updated_at) VALUES (?, ?, 1, 0, ?, ?, ?)",
            (project_id, key, json_text(definition_body(data)), created, now),
        )
    except sqlite3.IntegrityError:
        raise Conflict.flag_key_taken(key) from None
    bump_definitions(conn, project_id)
    return int(cur.lastrowid or 0)


def replace_flag(
    conn: sqlite3.Connection, project_id: int, flag_id: int, data: dict[str, Any], now: str
) -> None:
    """Replace the flag with ``data``; ``data["version"]`` must be the current version."""
    expected = data.get("version")
    row = conn.execute(
        "SELECT version FROM feature_flags WHERE project_id = ? AND id = ?",
        (project_id, flag_id),
    ).fetchone()
    if row is None:
        raise NotFound(f"feature flag {flag_id}")
    if expected is not None and row[0] != expected:
        raise Conflict.flag_version_stale()
    try:
        conn.execute(
            "UPDATE feature_flags SET key = ?, data = ?, deleted = ?, "
            "version = version + 1, updated_at = ? WHERE id = ?",
            (
                data["key"],
                json_text(definition_body(data)),
                int(bool(data.get("deleted"))),
                now,
                flag_id,
            ),
        )
    except sqlite3.IntegrityError:
        raise Conflict.flag_key_taken(data["key"]) from None
    bump_definitions(conn, project_id)


def flag_in(conn: sqlite3.Connection, flag_id: int) -> dict[str, Any]:
    row = conn.execute(f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE id = ?", (flag_id,))
    return flag_record(row.fetchone())


def log_flag(
    conn: sqlite3.Connection,
    project_id: int,
    before: dict[str, Any] | None,
    after: dict[str, Any],
    source: ChangeSource | None,
) -> None:
    """The activity record and the version row of a flag write, in its transaction."""
    now_ms = int(time.time() * 1000)
    if before is not None:  # a flag older than the history: keep the version it replaces
        write_flag_version(conn, project_id, before, None, None, now_ms)
    activity_id = write_change(
        conn,
        project_id=project_id,
        scope=Scope.FEATURE_FLAG,
        item_id=after["id"],
        source=source,
        before=before,
        after=after,
        now_ms=now_ms,
    )
    user_id = source.actor.user_id if source else None
    write_flag_version(conn, project_id, after, activity_id, user_id, now_ms)


def update_flag_logged(
    conn: sqlite3.Connection,
    project_id: int,
    flag_id: int,
    data: dict[str, Any],
    source: ChangeSource | None,
    now: str,
) -> None:
    """The flag API's update: replace the flag (version checked) and log it."""
    found = conn.execute(
        f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE project_id = ? AND id = ?",
        (project_id, flag_id),
    ).fetchone()
    replace_flag(conn, project_id, flag_id, data, now)  # NotFound when there is none
    before = flag_record(found) if found else None
    log_flag(conn, project_id, before, flag_in(conn, flag_id), source)
