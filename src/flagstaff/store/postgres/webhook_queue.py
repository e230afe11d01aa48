"""Webhook deliveries enqueued in the transaction of the activity row they are about."""

from __future__ import annotations

import asyncpg
import msgspec

from flagstaff.activity.records import ActivityRecord
from flagstaff.store.webhook_rows import deliveries_for

_decode = msgspec.json.decode


async def enqueue_deliveries(
    conn: asyncpg.Connection, record: ActivityRecord, activity_id: int, activity_uuid: str
) -> int:
    """One pending delivery per enabled webhook of the project whose scopes match; how many.
    (The unique (webhook, activity) pair means one activity row is never sent twice.)"""
    hooks = await conn.fetch(
        "SELECT id, scopes FROM webhooks WHERE project_id = $1 AND enabled", record.project_id
    )
    if not hooks:
        return 0
    user = None
    if record.actor.user_id is not None:
        row = await conn.fetchrow(
            "SELECT email, first_name FROM users WHERE id = $1", record.actor.user_id
        )
        user = (row[0], row[1]) if row else None
    new = deliveries_for(
        record, activity_id, activity_uuid, [(h[0], _decode(h[1])) for h in hooks], user
    )
    await conn.executemany(
        "INSERT INTO webhook_deliveries (webhook_id, project_id, activity_id, event, body, "
        "status, attempts, next_attempt_ms, created_at_ms) "
        "VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $6) ON CONFLICT DO NOTHING",
        [
            (d.webhook_id, record.project_id, activity_id, d.event, d.body, record.created_at_ms)
            for d in new
        ],
    )
    return len(new)
