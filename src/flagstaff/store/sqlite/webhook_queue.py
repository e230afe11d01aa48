"""Webhook deliveries enqueued in the transaction of the activity row they are about."""

from __future__ import annotations

import sqlite3

import msgspec

from flagstaff.activity.records import ActivityRecord
from flagstaff.store.webhook_rows import deliveries_for

_decode = msgspec.json.decode


def enqueue_deliveries(
    conn: sqlite3.Connection, record: ActivityRecord, activity_id: int, activity_uuid: str
) -> int:
    """One pending delivery per enabled webhook of the project whose scopes match; how many.
    (The unique (webhook, activity) pair means one activity row is never sent twice.)"""
    hooks = conn.execute(
        "SELECT id, scopes FROM webhooks WHERE project_id = ? AND enabled = 1",
        (record.project_id,),
    ).fetchall()
    if not hooks:
        return 0
    user = None
    if record.actor.user_id is not None:
        user = conn.execute(
            "SELECT email, first_name FROM users WHERE id = ?", (record.actor.user_id,)
        ).fetchone()
    new = deliveries_for(
        record, activity_id, activity_uuid, [(h[0], _decode(h[1])) for h in hooks], user
    )
    conn.executemany(
        "INSERT INTO webhook_deliveries (webhook_id, project_id, activity_id, event, body, "
        "status, attempts, next_attempt_ms, created_at_ms) "
        "VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?) ON CONFLICT DO NOTHING",
        [
            (d.webhook_id, record.project_id, activity_id, d.event, d.body,
             record.created_at_ms, record.created_at_ms)
            for d in new
        ],
    )  # fmt: skip
    return len(new)
