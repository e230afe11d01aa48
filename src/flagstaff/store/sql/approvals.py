"""Approval policies and change requests (a mixin of both stores). A decision and the change
it applies (a flag update, a scheduled change) commit in one transaction."""

from __future__ import annotations

from typing import Protocol

from flagstaff.activity.approvals import (
    ApprovalPolicy,
    ChangeRequest,
    RequestKind,
    RequestStatus,
)
from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.activity.scheduled import Operation, ScheduledChange
from flagstaff.store.approval_rows import (
    POLICY_COLUMNS,
    REQUEST_COLUMNS,
    decision_activity,
    policy_record,
    request_activity,
    request_record,
)
from flagstaff.store.records import Conflict, Page
from flagstaff.store.rows import now_iso
from flagstaff.store.sql.activity import insert_scheduled_change, write_change
from flagstaff.store.sql.db import Db, Tx, by_id, json_arg, page
from flagstaff.store.sql.flag_writes import flag_write_of, write_flag


async def _request_in(tx: Tx, request_id: int) -> ChangeRequest:
    row = await tx.fetchrow(
        f"SELECT {REQUEST_COLUMNS} FROM change_requests WHERE id = $1", request_id
    )
    return request_record(row)


class ApprovalMethods(Protocol):
    sql: Db

    async def approval_policy(self, project_id: int) -> ApprovalPolicy:
        row = await self.sql.fetchrow(
            f"SELECT {POLICY_COLUMNS} FROM approval_policies WHERE project_id = $1", project_id
        )
        return policy_record(row)

    async def set_approval_policy(
        self, project_id: int, enabled: bool, source: ChangeSource, now_ms: int
    ) -> ApprovalPolicy:
        async def write(tx: Tx) -> None:
            before = policy_record(
                await tx.fetchrow(
                    f"SELECT {POLICY_COLUMNS} FROM approval_policies WHERE project_id = $1 "
                    "FOR UPDATE",
                    project_id,
                )
            )
            await tx.execute(
                "INSERT INTO approval_policies (project_id, enabled, updated_at_ms, updated_by) "
                "VALUES ($1, $2, $3, $4) ON CONFLICT (project_id) DO UPDATE SET "
                "enabled = excluded.enabled, updated_at_ms = excluded.updated_at_ms, "
                "updated_by = excluded.updated_by",
                project_id,
                enabled,
                now_ms,
                source.actor.user_id,
            )
            await write_change(
                tx, project_id, Scope.PROJECT, project_id, source,
                {"name": "approval policy", "approval_required": before.enabled},
                {"name": "approval policy", "approval_required": enabled}, now_ms,
            )  # fmt: skip

        await self.sql.write(write)
        return ApprovalPolicy(enabled, now_ms, source.actor.user_id)

    async def create_change_request(
        self, request: ChangeRequest, flag_key: str, source: ChangeSource
    ) -> ChangeRequest:
        """Store a pending request (its id given by the store) and its activity record."""

        async def write(tx: Tx) -> ChangeRequest:
            request_id = await tx.fetchval(
                "INSERT INTO change_requests (project_id, flag_id, kind, body, base_version, "
                "author_user_id, author_key_id, status, created_at_ms) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
                request.project_id,
                request.flag_id,
                request.kind.value,
                json_arg(request.body),
                request.base_version,
                request.author_user_id,
                request.author_key_id,
                RequestStatus.PENDING.value,
                request.created_at_ms,
            )
            made = await _request_in(tx, int(request_id))
            await write_change(
                tx, made.project_id, Scope.CHANGE_REQUEST, made.id, source, None,
                request_activity(made, flag_key), made.created_at_ms,
            )  # fmt: skip
            return made

        return await self.sql.write(write)

    async def list_change_requests(
        self,
        project_id: int,
        status: RequestStatus | None,
        flag_id: int | None,
        limit: int,
        offset: int,
    ) -> Page:
        """Newest first."""
        where = (
            "project_id = $1 AND ($2::text IS NULL OR status = $2) "
            "AND ($3::bigint IS NULL OR flag_id = $3)"
        )
        args = (project_id, status.value if status else None, flag_id)
        return await page(
            self.sql, f"change_requests WHERE {where}", REQUEST_COLUMNS, "id DESC", args,
            limit, offset, request_record,
        )  # fmt: skip

    async def get_change_request(self, project_id: int, request_id: int) -> ChangeRequest | None:
        row = await by_id(self.sql, "change_requests", REQUEST_COLUMNS, project_id, request_id)
        return request_record(row) if row else None

    async def decide_change_request(
        self,
        decided: ChangeRequest,
        flag_key: str,
        source: ChangeSource,
        apply_source: ChangeSource | None = None,
    ) -> ChangeRequest:
        """Store the decision (Conflict on ``status`` when the request is no longer pending)
        and, with ``apply_source``, carry out its change in the same transaction: an update
        or delete through the flag update path (Conflict on ``version`` when the flag moved),
        a schedule by creating the scheduled change."""
        now = now_iso()

        async def write(tx: Tx) -> ChangeRequest:
            changed = await tx.execute(
                "UPDATE change_requests SET status = $1, decided_by = $2, decided_at_ms = $3, "
                "comment = $4 WHERE project_id = $5 AND id = $6 AND status = 'pending'",
                decided.status.value,
                decided.decided_by,
                decided.decided_at_ms,
                decided.comment,
                decided.project_id,
                decided.id,
            )
            if changed == 0:
                raise Conflict("status", "the request was decided meanwhile")
            if apply_source is not None and decided.flag_id is not None:
                if decided.kind is RequestKind.SCHEDULE:
                    body = decided.body
                    change = ScheduledChange(
                        0, decided.project_id, decided.flag_id, Operation(body["operation"]),
                        body["payload"], int(body["run_at_ms"]), decided.author_user_id,
                        decided.decided_at_ms or 0,
                    )  # fmt: skip
                    await insert_scheduled_change(tx, change)
                else:
                    write = flag_write_of(decided.body, decided.flag_id)
                    await write_flag(tx, decided.project_id, write, now, apply_source)
            before, after = decision_activity(decided, flag_key)
            await write_change(
                tx, decided.project_id, Scope.CHANGE_REQUEST, decided.id, source, before, after,
                decided.decided_at_ms or 0,
            )  # fmt: skip
            return await _request_in(tx, decided.id)

        return await self.sql.write(write)
