"""Approval policies and change requests on SQLite (a mixin of the store). A decision and the
change it applies (a flag update, a scheduled change) commit in one writer savepoint."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

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
from flagstaff.store.rows import json_text, now_iso
from flagstaff.store.sqlite.accounts import insert_scheduled_change, write_change
from flagstaff.store.sqlite.flag_writes import write_flag

if TYPE_CHECKING:
    from flagstaff.store.sqlite.writer import Writer


def _request_in(conn: sqlite3.Connection, request_id: int) -> ChangeRequest:
    row = conn.execute(
        f"SELECT {REQUEST_COLUMNS} FROM change_requests WHERE id = ?", (request_id,)
    ).fetchone()
    return request_record(row)


class ApprovalMethods:
    _writer: Writer

    @property
    def db(self) -> sqlite3.Connection:  # provided by SQLiteStore
        raise NotImplementedError

    async def approval_policy(self, project_id: int) -> ApprovalPolicy:
        row = self.db.execute(
            f"SELECT {POLICY_COLUMNS} FROM approval_policies WHERE project_id = ?", (project_id,)
        ).fetchone()
        return policy_record(row)

    async def set_approval_policy(
        self, project_id: int, enabled: bool, source: ChangeSource, now_ms: int
    ) -> ApprovalPolicy:
        def write(conn: sqlite3.Connection) -> ApprovalPolicy:
            before = policy_record(
                conn.execute(
                    f"SELECT {POLICY_COLUMNS} FROM approval_policies WHERE project_id = ?",
                    (project_id,),
                ).fetchone()
            )
            conn.execute(
                "INSERT INTO approval_policies (project_id, enabled, updated_at_ms, updated_by) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (project_id) DO UPDATE SET "
                "enabled = excluded.enabled, updated_at_ms = excluded.updated_at_ms, "
                "updated_by = excluded.updated_by",
                (project_id, int(enabled), now_ms, source.actor.user_id),
            )
            write_change(
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

        return await self._writer.submit(write)

    async def create_change_request(
        self, request: ChangeRequest, flag_key: str, source: ChangeSource
    ) -> ChangeRequest:
        def write(conn: sqlite3.Connection) -> ChangeRequest:
            cur = conn.execute(
                "INSERT INTO change_requests (project_id, flag_id, kind, body, base_version, "
                "author_user_id, author_key_id, status, created_at_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    request.project_id, request.flag_id, request.kind.value,
                    json_text(request.body), request.base_version, request.author_user_id,
                    request.author_key_id, RequestStatus.PENDING.value, request.created_at_ms,
                ),
            )  # fmt: skip
            made = _request_in(conn, int(cur.lastrowid or 0))
            write_change(
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

        return await self._writer.submit(write)

    async def list_change_requests(
        self,
        project_id: int,
        status: RequestStatus | None,
        flag_id: int | None,
        limit: int,
        offset: int,
    ) -> Page:
        """Newest first."""
        where, args = "project_id = ?", [project_id]
        if status is not None:
            where += " AND status = ?"
            args.append(status.value)
        if flag_id is not None:
            where += " AND flag_id = ?"
            args.append(flag_id)
        count = self.db.execute(f"SELECT COUNT(*) FROM change_requests WHERE {where}", args)
        rows = self.db.execute(
            f"SELECT {REQUEST_COLUMNS} FROM change_requests WHERE {where} "
            "ORDER BY id DESC LIMIT ? OFFSET ?",
            [*args, limit, offset],
        ).fetchall()
        return Page(int(count.fetchone()[0]), [request_record(r) for r in rows])

    async def get_change_request(self, project_id: int, request_id: int) -> ChangeRequest | None:
        row = self.db.execute(
            f"SELECT {REQUEST_COLUMNS} FROM change_requests WHERE project_id = ? AND id = ?",
            (project_id, request_id),
        ).fetchone()
        return request_record(row) if row else None

    async def decide_change_request(
        self,
        decided: ChangeRequest,
        flag_key: str,
        source: ChangeSource,
        apply_source: ChangeSource | None = None,
    ) -> ChangeRequest:
        now = now_iso()

        def write(conn: sqlite3.Connection) -> ChangeRequest:
            cur = conn.execute(
                "UPDATE change_requests SET status = ?, decided_by = ?, decided_at_ms = ?, "
                "comment = ? WHERE project_id = ? AND id = ? AND status = 'pending'",
                (
                    decided.status.value, decided.decided_by, decided.decided_at_ms,
                    decided.comment, decided.project_id, decided.id,
                ),
            )  # fmt: skip
            if cur.rowcount == 0:
                raise Conflict("status", "the request was decided meanwhile")
            if apply_source is not None and decided.flag_id is not None:
                if decided.kind is RequestKind.SCHEDULE:
                    body = decided.body
                    insert_scheduled_change(
                        conn, decided.project_id, decided.flag_id,
                        Operation(body["operation"]), body["payload"], int(body["run_at_ms"]),
                        decided.author_user_id, decided.decided_at_ms or 0,
                    )  # fmt: skip
                else:
                    write_flag(
                        conn, decided.project_id, decided.body, now, apply_source, decided.flag_id
                    )
            before, after = decision_activity(decided, flag_key)
            write_change(
                conn,
                project_id=decided.project_id,
                scope=Scope.CHANGE_REQUEST,
                item_id=decided.id,
                source=source,
                before=before,
                after=after,
                now_ms=decided.decided_at_ms or 0,
            )
            return _request_in(conn, decided.id)

        return await self._writer.submit(write)
