"""The activity log, flag versions and scheduled changes, on either engine.

The ``write_*`` functions take the caller's transaction, so a change, its activity record and
that record's webhook deliveries commit together.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

import msgspec

from flagstaff.activity.diff import record_change
from flagstaff.activity.records import ActivityRecord, ChangeSource, Scope, StoredActivity
from flagstaff.activity.rollback import FlagVersion
from flagstaff.activity.scheduled import Operation, ScheduledChange
from flagstaff.store.account_rows import (
    ACTIVITY_COLUMNS,
    SCHEDULED_COLUMNS,
    activity_filter,
    activity_record,
    scheduled_record,
)
from flagstaff.store.sql.db import Db, Tx, insert_id, json_arg
from flagstaff.store.webhook_rows import deliveries_for

_decode = msgspec.json.decode


async def enqueue_deliveries(
    tx: Tx, record: ActivityRecord, activity_id: int, activity_uuid: str
) -> int:
    """One pending delivery per enabled webhook of the project whose scopes match; how many.
    (The unique (webhook, activity) pair means one activity row is never sent twice.)"""
    hooks = await tx.fetch(
        "SELECT id, scopes FROM webhooks WHERE project_id = $1 AND enabled", record.project_id
    )
    if not hooks:
        return 0
    user = None
    if record.actor.user_id is not None:
        row = await tx.fetchrow(
            "SELECT email, first_name FROM users WHERE id = $1", record.actor.user_id
        )
        user = (row[0], row[1]) if row else None
    new = deliveries_for(
        record, activity_id, activity_uuid, [(h[0], _decode(h[1])) for h in hooks], user
    )
    await tx.executemany(
        "INSERT INTO webhook_deliveries (webhook_id, project_id, activity_id, event, body, "
        "status, attempts, next_attempt_ms, created_at_ms) "
        "VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $6) ON CONFLICT DO NOTHING",
        [
            (d.webhook_id, record.project_id, activity_id, d.event, d.body, record.created_at_ms)
            for d in new
        ],
    )
    return len(new)


async def write_activity(tx: Tx, record: ActivityRecord) -> int:
    """The activity row and, in the same transaction, its webhook deliveries."""
    activity_uuid = str(uuid.uuid4())
    activity_id = await insert_id(
        tx,
        "INSERT INTO activity_log (uuid, project_id, scope, item_id, activity, user_id, "
        "is_system, detail, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
        "RETURNING id",
        activity_uuid,
        record.project_id,
        record.scope.value,
        record.item_id,
        record.activity.value,
        record.actor.user_id,
        record.actor.is_system,
        json_arg(record.detail),
        record.created_at_ms,
    )
    await enqueue_deliveries(tx, record, activity_id, activity_uuid)
    return activity_id


async def write_change(
    tx: Tx,
    project_id: int,
    scope: Scope,
    item_id: int | str,
    source: ChangeSource | None,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    now_ms: int,
) -> int | None:
    """The activity record of a change of item ``item_id`` from ``before`` to ``after``, in
    the caller's transaction; its id or None when nothing visible changed."""
    source = source or ChangeSource()
    record = record_change(
        project_id=project_id,
        scope=scope,
        item_id=item_id,
        actor=source.actor,
        before=before,
        after=after,
        now_ms=now_ms,
        activity=source.activity,
        trigger=source.trigger,
    )
    return await write_activity(tx, record) if record is not None else None


async def write_flag_version(
    tx: Tx,
    project_id: int,
    flag: dict[str, Any],
    activity_id: int | None,
    user_id: int | None,
    now_ms: int,
) -> None:
    """Keep the flag's full body at its version (the first writer of a version wins, so a
    pre-existing version written before the history existed is kept once)."""
    await tx.execute(
        "INSERT INTO feature_flag_versions (flag_id, version, project_id, data, activity_id, "
        "user_id, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) "
        "ON CONFLICT (flag_id, version) DO NOTHING",
        flag["id"],
        flag["version"],
        project_id,
        json_arg(flag),
        activity_id,
        user_id,
        now_ms,
    )


async def insert_scheduled_change(tx: Tx, change: ScheduledChange) -> int:
    """Store a new scheduled change (its ``id`` is ignored); the id it gets."""
    return await insert_id(
        tx,
        "INSERT INTO scheduled_changes (project_id, flag_id, operation, payload, run_at_ms, "
        "created_by, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        change.project_id,
        change.flag_id,
        change.operation.value,
        json_arg(change.payload),
        change.run_at_ms,
        change.created_by,
        change.created_at_ms,
    )


class ActivityMethods(Protocol):
    """The activity log's reads, flag versions and scheduled changes (a mixin of the stores)."""

    sql: Db

    async def list_activity(
        self,
        project_id: int,
        *,
        scope: Scope | None = None,
        item_id: str | None = None,
        user_id: int | None = None,
        before_id: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[StoredActivity]:
        """Newest first."""
        where, args = activity_filter(project_id, scope, item_id, user_id, before_id)
        n = len(args)
        rows = await self.sql.fetch(
            f"SELECT {ACTIVITY_COLUMNS} FROM activity_log a LEFT JOIN users u ON u.id = a.user_id "
            f"WHERE {where} ORDER BY a.id DESC LIMIT ${n + 1} OFFSET ${n + 2}",
            *args,
            limit,
            offset,
        )
        return [activity_record(r) for r in rows]

    async def count_activity(self, project_id: int, scope: Scope, item_id: str | None) -> int:
        where, args = activity_filter(project_id, scope, item_id, None, None)
        return int(
            await self.sql.fetchval(f"SELECT COUNT(*) FROM activity_log a WHERE {where}", *args)
        )

    async def flag_versions(self, project_id: int, flag_id: int) -> list[FlagVersion]:
        rows = await self.sql.fetch(
            "SELECT version, data, created_at_ms, user_id, activity_id FROM feature_flag_versions "
            "WHERE project_id = $1 AND flag_id = $2 ORDER BY version",
            project_id,
            flag_id,
        )
        return [FlagVersion(r[0], _decode(r[1]), r[2], r[3], r[4]) for r in rows]

    # scheduled changes ---------------------------------------------------------------------

    async def create_scheduled_change(
        self,
        project_id: int,
        flag_id: int,
        operation: Operation,
        payload: dict[str, Any],
        run_at_ms: int,
        created_by: int | None,
        now_ms: int,
    ) -> ScheduledChange:
        change = ScheduledChange(
            0, project_id, flag_id, operation, payload, run_at_ms, created_by, now_ms
        )
        change_id = await self.sql.write(lambda tx: insert_scheduled_change(tx, change))
        return msgspec.structs.replace(change, id=change_id)

    async def list_scheduled_changes(
        self, project_id: int, flag_id: int | None
    ) -> list[ScheduledChange]:
        rows = await self.sql.fetch(
            f"SELECT {SCHEDULED_COLUMNS} FROM scheduled_changes WHERE project_id = $1 "
            "AND ($2::bigint IS NULL OR flag_id = $2) ORDER BY run_at_ms, id",
            project_id,
            flag_id,
        )
        return [scheduled_record(r) for r in rows]

    async def delete_scheduled_change(self, project_id: int, change_id: int) -> bool:
        """Cancel a change that has not run yet."""
        deleted = await self.sql.execute(
            "DELETE FROM scheduled_changes WHERE project_id = $1 AND id = $2 "
            "AND executed_at_ms IS NULL",
            project_id,
            change_id,
        )
        return deleted > 0

    async def claim_due_changes(self, now_ms: int, limit: int) -> list[ScheduledChange]:
        """The due changes, oldest first, marked as executed so no other worker or node runs
        them (rows another node is claiming are skipped, not waited for)."""
        pending = await self.sql.fetchval(  # a read first: an idle poll costs no write
            "SELECT 1 FROM scheduled_changes WHERE executed_at_ms IS NULL AND run_at_ms <= $1 "
            "LIMIT 1",
            now_ms,
        )
        if pending is None:
            return []

        async def claim(tx: Tx) -> list[Any]:
            rows = await tx.fetch(
                f"SELECT {SCHEDULED_COLUMNS} FROM scheduled_changes WHERE executed_at_ms IS NULL "
                "AND run_at_ms <= $1 ORDER BY run_at_ms, id LIMIT $2 FOR UPDATE SKIP LOCKED",
                now_ms,
                limit,
            )
            await tx.executemany(
                "UPDATE scheduled_changes SET executed_at_ms = $1 WHERE id = $2",
                [(now_ms, r[0]) for r in rows],
            )
            return rows

        return [scheduled_record(r) for r in await self.sql.write(claim)]

    async def fail_scheduled_change(self, change_id: int, failure: str) -> None:
        await self.sql.execute(
            "UPDATE scheduled_changes SET failure = $1 WHERE id = $2", failure, change_id
        )
