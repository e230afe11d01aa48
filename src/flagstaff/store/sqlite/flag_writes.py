"""Flag writes inside a caller's transaction: the flag API's and those a survey or early
access feature save makes together with its own row."""

from __future__ import annotations

import sqlite3
from typing import Any

from flagstaff.store.base import Conflict, NotFound
from flagstaff.store.rows import definition_body, json_text


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
