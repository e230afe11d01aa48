"""Approval policies and change requests on PostgreSQL (a mixin of the store). A decision and
the change it applies (a flag update, a scheduled change) commit in one transaction."""

from __future__ import annotations

import asyncpg

from flagstaff.activity.approvals import (
    ApprovalPolicy,
    ChangeRequest,
    RequestKind,
    RequestStatus,
)
from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.activity.scheduled import Operation
from flagstaff.store.approval_rows import (
    POLICY_COLUMNS,
    REQUEST_COLUMNS,
    decision_activity,
    policy_record,
    request_activity,
    request_record,
)
from flagstaff.store.base import Conflict, Page
from flagstaff.store.postgres.accounts import insert_scheduled_change, write_change
from flagstaff.store.postgres.flag_writes import write_flag
from flagstaff.store.postgres.sql import pg_text
from flagstaff.store.rows import json_text, now_iso


async def _request_in(conn: asyncpg.Connection, request_id: int) -> ChangeRequest:
    row = await conn.fetchrow(
        f"SELECT {REQUEST_COLUMNS} FROM change_requests WHERE id = $1", request_id
    )
    return request_record(row)


class ApprovalMethods:
    @property
    def pool(self) -> asyncpg.Pool:  # provided by PostgresStore
        raise NotImplementedError

    async def approval_policy(self, project_id: int) -> ApprovalPolicy:
        row = await self.pool.fetchrow(
            f"SELECT {POLICY_COLUMNS} FROM approval_policies WHERE project_id = $1", project_id
        )
        return policy_record(row)

    async def set_approval_policy(
        self, project_id: int, enabled: bool, source: ChangeSource, now_ms: int
    ) -> ApprovalPolicy:
        async with self.pool.acquire() as conn, conn.transaction():
            before = policy_record(
                await conn.fetchrow(
                    f"SELECT {POLICY_COLUMNS} FROM approval_policies WHERE project_id = $1 "
                    "FOR UPDATE",
                    project_id,
                )
            )
            await conn.execute(
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
                conn,
                project_id=project_id,
                scope=Scope.PROJECT,
                item_id=project_id,
                source=source,
                before={"name": "approval policy", "approval_required": before.enabled},
                after={"name": "approval policy", "approval_required": enabled},
                now_ms=now_ms,
            )
        return ApprovalPolicy(enabled, now_ms, source.actor.user_id)

    async def create_change_request(
        self, request: ChangeRequest, flag_key: str, source: ChangeSource
    ) -> ChangeRequest:
        async with self.pool.acquire() as conn, conn.transaction():
            request_id = await conn.fetchval(
                "INSERT INTO change_requests (project_id, flag_id, kind, body, base_version, "
                "author_user_id, author_key_id, status, created_at_ms) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
                request.project_id,
                request.flag_id,
                request.kind.value,
                json_text(request.body).replace("\\u0000", "\\ufffd"),
                request.base_version,
                request.author_user_id,
                request.author_key_id,
                RequestStatus.PENDING.value,
                request.created_at_ms,
            )
            made = await _request_in(conn, int(request_id))
            await write_change(
                conn,
                project_id=made.project_id,
                scope=Scope.CHANGE_REQUEST,
                item_id=made.id,
                source=source,
                before=None,
                after=request_activity(made, flag_key),
                now_ms=made.created_at_ms,
            )
        return made

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
        async with self.pool.acquire() as conn:
            count = await conn.fetchval(
                f"SELECT count(*) FROM change_requests WHERE {where}", *args
            )
            rows = await conn.fetch(
                f"SELECT {REQUEST_COLUMNS} FROM change_requests WHERE {where} "
                "ORDER BY id DESC LIMIT $4 OFFSET $5",
                *args,
                limit,
                offset,
            )
        return Page(int(count), [request_record(r) for r in rows])

    async def get_change_request(self, project_id: int, request_id: int) -> ChangeRequest | None:
        row = await self.pool.fetchrow(
            f"SELECT {REQUEST_COLUMNS} FROM change_requests WHERE project_id = $1 AND id = $2",
            project_id,
            request_id,
        )
        return request_record(row) if row else None

    async def decide_change_request(
        self,
        decided: ChangeRequest,
        flag_key: str,
        source: ChangeSource,
        apply_source: ChangeSource | None = None,
    ) -> ChangeRequest:
        now = now_iso()
        async with self.pool.acquire() as conn, conn.transaction():
            status = await conn.execute(
                "UPDATE change_requests SET status = $1, decided_by = $2, decided_at_ms = $3, "
                "comment = $4 WHERE project_id = $5 AND id = $6 AND status = 'pending'",
                decided.status.value,
                decided.decided_by,
                decided.decided_at_ms,
                pg_text(decided.comment),
                decided.project_id,
                decided.id,
            )
            if status == "UPDATE 0":
                raise Conflict("status", "the request was decided meanwhile")
            if apply_source is not None and decided.flag_id is not None:
                if decided.kind is RequestKind.SCHEDULE:
                    body = decided.body
                    await insert_scheduled_change(
                        conn, decided.project_id, decided.flag_id,
                        Operation(body["operation"]), body["payload"], int(body["run_at_ms"]),
                        decided.author_user_id, decided.decided_at_ms or 0,
                    )  # fmt: skip
                else:
                    await write_flag(
                        conn, decided.project_id, decided.body, now, apply_source, decided.flag_id
                    )
            before, after = decision_activity(decided, flag_key)
            await write_change(
                conn,
                project_id=decided.project_id,
                scope=Scope.CHANGE_REQUEST,
                item_id=decided.id,
                source=source,
                before=before,
                after=after,
                now_ms=decided.decided_at_ms or 0,
            )
            return await _request_in(conn, decided.id)
