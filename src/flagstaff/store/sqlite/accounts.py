"""The :class:`~flagstaff.accounts.store.AccountStore` and the activity log on SQLite.

A mixin of :class:`~flagstaff.store.sqlite.store.SQLiteStore`: reads use its read-only
connection (``self.db``), writes its writer thread (``self._writer``). The ``write_*``
functions run inside a writer savepoint, so a change and its activity record commit together.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import TYPE_CHECKING, Any

import msgspec

from flagstaff.accounts import keys
from flagstaff.accounts.api_keys import key_prefix
from flagstaff.accounts.records import ApiKeyInfo, LoginAttempt, Membership, Role, Session, User
from flagstaff.accounts.roles import leaves_no_admin
from flagstaff.activity.diff import record_change
from flagstaff.activity.records import (
    Activity,
    ActivityRecord,
    ChangeSource,
    Scope,
    StoredActivity,
)
from flagstaff.activity.rollback import FlagVersion
from flagstaff.activity.scheduled import Operation, ScheduledChange
from flagstaff.store.account_rows import (
    ACTIVITY_COLUMNS,
    KEY_COLUMNS,
    SCHEDULED_COLUMNS,
    SESSION_COLUMNS,
    USER_COLUMNS,
    activity_filter,
    activity_record,
    key_record,
    membership_detail,
    scheduled_record,
    session_record,
    user_record,
)
from flagstaff.store.base import Conflict, NotFound
from flagstaff.store.rows import json_text, now_iso
from flagstaff.store.sqlite.webhook_queue import enqueue_deliveries

if TYPE_CHECKING:
    from flagstaff.store.sqlite.writer import Writer


def write_activity(conn: sqlite3.Connection, record: ActivityRecord) -> int:
    """The activity row and, in the same transaction, its webhook deliveries."""
    activity_uuid = str(uuid.uuid4())
    cur = conn.execute(
        "INSERT INTO activity_log (uuid, project_id, scope, item_id, activity, user_id, "
        "is_system, detail, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            activity_uuid,
            record.project_id,
            record.scope.value,
            record.item_id,
            record.activity.value,
            record.actor.user_id,
            int(record.actor.is_system),
            msgspec.json.encode(record.detail).decode(),
            record.created_at_ms,
        ),
    )
    activity_id = int(cur.lastrowid or 0)
    enqueue_deliveries(conn, record, activity_id, activity_uuid)
    return activity_id


def write_change(
    conn: sqlite3.Connection,
    *,
    project_id: int,
    scope: Scope,
    item_id: int | str,
    source: ChangeSource | None,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    now_ms: int,
) -> int | None:
    """The activity record of a change, in the caller's transaction; its id or None when
    nothing visible changed."""
    record = record_change(
        project_id=project_id,
        scope=scope,
        item_id=item_id,
        actor=(source or ChangeSource()).actor,
        before=before,
        after=after,
        now_ms=now_ms,
        activity=(source or ChangeSource()).activity,
        trigger=(source or ChangeSource()).trigger,
    )
    return write_activity(conn, record) if record is not None else None


def write_flag_version(
    conn: sqlite3.Connection,
    project_id: int,
    flag: dict[str, Any],
    activity_id: int | None,
    user_id: int | None,
    now_ms: int,
) -> None:
    """Keep the flag's full body at its version (the first writer of a version wins, so a
    pre-existing version written before the history existed is kept once)."""
    conn.execute(
        "INSERT OR IGNORE INTO feature_flag_versions (flag_id, version, project_id, data, "
        "activity_id, user_id, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (flag["id"], flag["version"], project_id, json_text(flag), activity_id, user_id, now_ms),
    )


def insert_scheduled_change(
    conn: sqlite3.Connection,
    project_id: int,
    flag_id: int,
    operation: Operation,
    payload: dict[str, Any],
    run_at_ms: int,
    created_by: int | None,
    now_ms: int,
) -> int:
    cur = conn.execute(
        "INSERT INTO scheduled_changes (project_id, flag_id, operation, payload, "
        "run_at_ms, created_by, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            project_id, flag_id, operation.value, json_text(payload), run_at_ms,
            created_by, now_ms,
        ),
    )  # fmt: skip
    return int(cur.lastrowid or 0)


class SQLiteAccounts:
    """Users, memberships, sessions, login attempts, personal keys and the activity log."""

    _writer: Writer
    db: sqlite3.Connection  # the store's read connection (SQLiteStore's property)

    # users ---------------------------------------------------------------------------------

    async def create_user(self, email: str, password_hash: str, now_ms: int) -> User:
        def write(conn: sqlite3.Connection) -> int:
            try:
                cur = conn.execute(
                    "INSERT INTO users (email, password_hash, created_at_ms) VALUES (?, ?, ?)",
                    (email, password_hash, now_ms),
                )
            except sqlite3.IntegrityError:
                raise Conflict("email", "a user with this email exists already") from None
            return int(cur.lastrowid or 0)

        user_id = await self._writer.submit(write)
        return User(user_id, email, password_hash, now_ms)

    async def get_user(self, user_id: int) -> User | None:
        row = self.db.execute(f"SELECT {USER_COLUMNS} FROM users WHERE id = ?", (user_id,))
        found = row.fetchone()
        return user_record(found) if found else None

    async def find_user_by_email(self, email: str) -> User | None:
        found = self.db.execute(
            f"SELECT {USER_COLUMNS} FROM users WHERE email = ?", (email,)
        ).fetchone()
        return user_record(found) if found else None

    async def count_users(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM users").fetchone()[0])

    async def set_password_hash(self, user_id: int, password_hash: str) -> None:
        await self._writer.submit(
            lambda c: c.execute(
                "UPDATE users SET password_hash = ? WHERE id = ?", (password_hash, user_id)
            )
        )

    async def record_login(self, user_id: int, now_ms: int) -> None:
        await self._writer.submit(
            lambda c: c.execute(
                "UPDATE users SET last_login_ms = ? WHERE id = ?", (now_ms, user_id)
            )
        )

    # memberships ---------------------------------------------------------------------------

    async def set_membership(
        self, user_id: int, project_id: int, role: Role, now_ms: int
    ) -> Membership:
        def write(conn: sqlite3.Connection) -> int:
            conn.execute(
                "INSERT INTO memberships (user_id, project_id, role, created_at_ms) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (user_id, project_id) DO UPDATE SET role = "
                "excluded.role",
                (user_id, project_id, role.value, now_ms),
            )
            row = conn.execute(
                "SELECT created_at_ms FROM memberships WHERE user_id = ? AND project_id = ?",
                (user_id, project_id),
            ).fetchone()
            return int(row[0])

        created = await self._writer.submit(write)
        return Membership(user_id, project_id, role, created)

    async def get_membership(self, user_id: int, project_id: int) -> Membership | None:
        row = self.db.execute(
            "SELECT user_id, project_id, role, created_at_ms FROM memberships "
            "WHERE user_id = ? AND project_id = ?",
            (user_id, project_id),
        ).fetchone()
        return Membership(row[0], row[1], Role(row[2]), row[3]) if row else None

    async def list_memberships(self, user_id: int) -> list[Membership]:
        rows = self.db.execute(
            "SELECT user_id, project_id, role, created_at_ms FROM memberships WHERE user_id = ? "
            "ORDER BY project_id",
            (user_id,),
        ).fetchall()
        return [Membership(r[0], r[1], Role(r[2]), r[3]) for r in rows]

    async def list_members(self, project_id: int) -> list[tuple[User, Membership]]:
        cols = ", ".join(f"u.{c.strip()}" for c in USER_COLUMNS.split(","))
        rows = self.db.execute(
            f"SELECT {cols}, m.role, m.created_at_ms FROM memberships m "
            "JOIN users u ON u.id = m.user_id WHERE m.project_id = ? ORDER BY u.email",
            (project_id,),
        ).fetchall()
        return [(user_record(r), Membership(r[0], project_id, Role(r[7]), r[8])) for r in rows]

    async def remove_membership(self, user_id: int, project_id: int) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM memberships WHERE user_id = ? AND project_id = ?",
                (user_id, project_id),
            )
            return cur.rowcount > 0

        return await self._writer.submit(write)

    async def change_membership(
        self,
        user_id: int,
        project_id: int,
        role: Role | None,
        now_ms: int,
        source: ChangeSource | None = None,
    ) -> Membership | None:
        def write(conn: sqlite3.Connection) -> Membership | None:
            row = conn.execute(
                "SELECT u.email, m.role, m.created_at_ms FROM users u LEFT JOIN memberships m "
                "ON m.user_id = u.id AND m.project_id = ? WHERE u.id = ?",
                (project_id, user_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"user {user_id}")
            email, raw_role, created = row
            current = Role(raw_role) if raw_role else None
            others = conn.execute(
                "SELECT COUNT(*) FROM memberships WHERE project_id = ? AND role = 'admin' "
                "AND user_id != ?",
                (project_id, user_id),
            ).fetchone()[0]
            if leaves_no_admin(current, role, others):
                raise Conflict.last_admin()
            if role is None and current is None:
                return None
            if role is None:
                conn.execute(
                    "DELETE FROM memberships WHERE user_id = ? AND project_id = ?",
                    (user_id, project_id),
                )
            else:
                conn.execute(
                    "INSERT INTO memberships (user_id, project_id, role, created_at_ms) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (user_id, project_id) DO UPDATE SET "
                    "role = excluded.role",
                    (user_id, project_id, role.value, now_ms),
                )
            write_change(
                conn,
                project_id=project_id,
                scope=Scope.MEMBERSHIP,
                item_id=user_id,
                source=source,
                before=membership_detail(email, current),
                after=membership_detail(email, role),
                now_ms=now_ms,
            )
            if role is None:
                return None
            return Membership(user_id, project_id, role, created if current else now_ms)

        return await self._writer.submit(write)

    # sessions ------------------------------------------------------------------------------

    async def create_session(
        self,
        user_id: int,
        token_hash: str,
        created_at_ms: int,
        expires_at_ms: int,
        ip: str,
        user_agent: str,
    ) -> Session:
        def write(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "INSERT INTO sessions (user_id, token_hash, created_at_ms, last_seen_ms, "
                "expires_at_ms, ip, user_agent) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (user_id, token_hash, created_at_ms, created_at_ms, expires_at_ms, ip, user_agent),
            )
            return int(cur.lastrowid or 0)

        session_id = await self._writer.submit(write)
        return Session(
            session_id, user_id, token_hash, created_at_ms, created_at_ms, expires_at_ms, ip,
            user_agent,
        )  # fmt: skip

    async def find_session(self, token_hash: str) -> Session | None:
        row = self.db.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE token_hash = ?", (token_hash,)
        ).fetchone()
        return session_record(row) if row else None

    async def touch_session(self, session_id: int, now_ms: int) -> None:
        await self._writer.submit(
            lambda c: c.execute(
                "UPDATE sessions SET last_seen_ms = ? WHERE id = ?", (now_ms, session_id)
            )
        )

    async def delete_session(self, token_hash: str) -> None:
        await self._writer.submit(
            lambda c: c.execute("DELETE FROM sessions WHERE token_hash = ?", (token_hash,))
        )

    async def delete_user_sessions(self, user_id: int, keep_session_id: int | None) -> int:
        def write(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "DELETE FROM sessions WHERE user_id = ? AND id IS NOT ?",
                (user_id, keep_session_id),
            )
            return cur.rowcount

        return await self._writer.submit(write)

    async def delete_expired_sessions(self, now_ms: int, idle_before_ms: int) -> int:
        def write(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "DELETE FROM sessions WHERE expires_at_ms <= ? OR last_seen_ms < ?",
                (now_ms, idle_before_ms),
            )
            return cur.rowcount

        return await self._writer.submit(write)

    # personal API keys ---------------------------------------------------------------------

    async def create_user_key(
        self,
        project_id: int,
        user_id: int | None,
        label: str,
        now_ms: int,
        source: ChangeSource | None = None,
    ) -> tuple[ApiKeyInfo, str]:
        secret = keys.new_personal_key()
        info = ApiKeyInfo(
            0, project_id, label, key_prefix(secret), keys.mask_key(secret), now_ms, user_id
        )

        def write(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "INSERT INTO personal_api_keys (project_id, label, secure_value, mask, "
                "created_at, user_id, prefix, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    project_id, label, keys.hash_key(secret), info.mask, now_iso(), user_id,
                    info.prefix, now_ms,
                ),
            )  # fmt: skip
            key_id = int(cur.lastrowid or 0)
            write_change(
                conn,
                project_id=project_id,
                scope=Scope.PERSONAL_API_KEY,
                item_id=key_id,
                source=source,
                before=None,
                after={"name": label, "prefix": info.prefix, "user_id": user_id},
                now_ms=now_ms,
            )
            return key_id

        key_id = await self._writer.submit(write)
        return msgspec.structs.replace(info, id=key_id), secret

    async def list_keys(self, project_id: int, user_id: int | None) -> list[ApiKeyInfo]:
        where, args = "project_id = ?", [project_id]
        if user_id is not None:
            where += " AND user_id = ?"
            args.append(user_id)
        rows = self.db.execute(
            f"SELECT {KEY_COLUMNS} FROM personal_api_keys WHERE {where} ORDER BY id", args
        ).fetchall()
        return [key_record(r) for r in rows]

    async def find_key(self, secret: str) -> ApiKeyInfo | None:
        row = self.db.execute(
            f"SELECT {KEY_COLUMNS} FROM personal_api_keys WHERE secure_value = ?",
            (keys.hash_key(secret),),
        ).fetchone()
        return key_record(row) if row else None

    async def revoke_key(
        self, project_id: int, key_id: int, now_ms: int, source: ChangeSource | None = None
    ) -> ApiKeyInfo | None:
        def write(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT label, prefix FROM personal_api_keys WHERE project_id = ? AND id = ? "
                "AND revoked_at_ms IS NULL",
                (project_id, key_id),
            ).fetchone()
            if row is None:
                return False
            conn.execute(
                "UPDATE personal_api_keys SET revoked_at_ms = ? WHERE id = ?", (now_ms, key_id)
            )
            write_change(
                conn,
                project_id=project_id,
                scope=Scope.PERSONAL_API_KEY,
                item_id=key_id,
                source=ChangeSource(
                    actor=(source or ChangeSource()).actor, activity=Activity.REVOKED
                ),
                before={"name": row[0], "prefix": row[1], "revoked": False},
                after={"name": row[0], "prefix": row[1], "revoked": True},
                now_ms=now_ms,
            )
            return True

        await self._writer.submit(write)
        row = self.db.execute(
            f"SELECT {KEY_COLUMNS} FROM personal_api_keys WHERE project_id = ? AND id = ?",
            (project_id, key_id),
        ).fetchone()
        return key_record(row) if row else None

    async def mark_key_used(self, key_id: int, now_ms: int) -> None:
        await self._writer.submit(
            lambda c: c.execute(
                "UPDATE personal_api_keys SET last_used_ms = ? WHERE id = ?", (now_ms, key_id)
            )
        )

    # login attempts ------------------------------------------------------------------------

    async def record_login_attempt(self, attempt: LoginAttempt) -> None:
        await self._writer.submit(
            lambda c: c.execute(
                "INSERT INTO login_attempts (email, ip, at_ms, succeeded) VALUES (?, ?, ?, ?)",
                (attempt.email, attempt.ip, attempt.at_ms, int(attempt.succeeded)),
            )
        )

    async def recent_login_attempts(self, email: str, ip: str, since_ms: int) -> list[LoginAttempt]:
        rows = self.db.execute(
            "SELECT email, ip, at_ms, succeeded FROM login_attempts "
            "WHERE (email = ? OR ip = ?) AND at_ms >= ? ORDER BY at_ms, id",
            (email, ip, since_ms),
        ).fetchall()
        return [LoginAttempt(r[0], r[1], r[2], bool(r[3])) for r in rows]

    async def prune_login_attempts(self, before_ms: int) -> int:
        def write(conn: sqlite3.Connection) -> int:
            return conn.execute("DELETE FROM login_attempts WHERE at_ms < ?", (before_ms,)).rowcount

        return await self._writer.submit(write)

    # the activity log ----------------------------------------------------------------------

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
        rows = self.db.execute(
            f"SELECT {ACTIVITY_COLUMNS} FROM activity_log a LEFT JOIN users u ON u.id = a.user_id "
            f"WHERE {where} ORDER BY a.id DESC LIMIT ? OFFSET ?",
            [*args, limit, offset],
        ).fetchall()
        return [activity_record(r) for r in rows]

    async def count_activity(self, project_id: int, scope: Scope, item_id: str | None) -> int:
        where, args = activity_filter(project_id, scope, item_id, None, None)
        row = self.db.execute(f"SELECT COUNT(*) FROM activity_log a WHERE {where}", args)
        return int(row.fetchone()[0])

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
        change_id = await self._writer.submit(
            lambda conn: insert_scheduled_change(
                conn, project_id, flag_id, operation, payload, run_at_ms, created_by, now_ms
            )
        )
        return ScheduledChange(
            change_id, project_id, flag_id, operation, payload, run_at_ms, created_by, now_ms
        )

    async def list_scheduled_changes(
        self, project_id: int, flag_id: int | None
    ) -> list[ScheduledChange]:
        where, args = "project_id = ?", [project_id]
        if flag_id is not None:
            where += " AND flag_id = ?"
            args.append(flag_id)
        rows = self.db.execute(
            f"SELECT {SCHEDULED_COLUMNS} FROM scheduled_changes WHERE {where} "
            "ORDER BY run_at_ms, id",
            args,
        ).fetchall()
        return [scheduled_record(r) for r in rows]

    async def delete_scheduled_change(self, project_id: int, change_id: int) -> bool:
        """Cancel a change that has not run yet."""

        def write(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM scheduled_changes WHERE project_id = ? AND id = ? "
                "AND executed_at_ms IS NULL",
                (project_id, change_id),
            )
            return cur.rowcount > 0

        return await self._writer.submit(write)

    async def claim_due_changes(self, now_ms: int, limit: int) -> list[ScheduledChange]:
        """The due changes, oldest first, marked as executed so no other worker runs them."""
        pending = self.db.execute(  # a read first: an idle poll costs no write transaction
            "SELECT 1 FROM scheduled_changes WHERE executed_at_ms IS NULL AND run_at_ms <= ? "
            "LIMIT 1",
            (now_ms,),
        ).fetchone()
        if pending is None:
            return []

        def write(conn: sqlite3.Connection) -> list[Any]:
            rows = conn.execute(
                f"SELECT {SCHEDULED_COLUMNS} FROM scheduled_changes WHERE executed_at_ms IS NULL "
                "AND run_at_ms <= ? ORDER BY run_at_ms, id LIMIT ?",
                (now_ms, limit),
            ).fetchall()
            conn.executemany(
                "UPDATE scheduled_changes SET executed_at_ms = ? WHERE id = ?",
                [(now_ms, r[0]) for r in rows],
            )
            return rows

        return [scheduled_record(r) for r in await self._writer.submit(write)]

    async def fail_scheduled_change(self, change_id: int, failure: str) -> None:
        await self._writer.submit(
            lambda c: c.execute(
                "UPDATE scheduled_changes SET failure = ? WHERE id = ?", (failure, change_id)
            )
        )

    async def flag_versions(self, project_id: int, flag_id: int) -> list[FlagVersion]:
        rows = self.db.execute(
            "SELECT version, data, created_at_ms, user_id, activity_id FROM feature_flag_versions "
            "WHERE project_id = ? AND flag_id = ? ORDER BY version",
            (project_id, flag_id),
        ).fetchall()
        return [FlagVersion(r[0], _decode(r[1]), r[2], r[3], r[4]) for r in rows]


_decode = msgspec.json.decode
