"""The :class:`~flagstaff.accounts.store.AccountStore` and the activity log on PostgreSQL.

A mixin of :class:`~flagstaff.store.postgres.store.PostgresStore` (``self.pool``). The
``write_*`` functions take the connection of the caller's transaction, so a change and its
activity record commit together.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
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
from flagstaff.store.postgres.sql import pg_text
from flagstaff.store.postgres.webhook_queue import enqueue_deliveries
from flagstaff.store.rows import json_text, now_iso

_decode = msgspec.json.decode


async def write_activity(conn: asyncpg.Connection, record: ActivityRecord) -> int:
    """The activity row and, in the same transaction, its webhook deliveries."""
    activity_uuid = str(uuid.uuid4())
    activity_id = int(
        await conn.fetchval(
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
            msgspec.json.encode(record.detail).decode().replace("\\u0000", "\\ufffd"),
            record.created_at_ms,
        )
    )
    await enqueue_deliveries(conn, record, activity_id, activity_uuid)
    return activity_id


async def write_change(
    conn: asyncpg.Connection,
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
    return await write_activity(conn, record) if record is not None else None


async def write_flag_version(
    conn: asyncpg.Connection,
    project_id: int,
    flag: dict[str, Any],
    activity_id: int | None,
    user_id: int | None,
    now_ms: int,
) -> None:
    """Keep the flag's full body at its version (the first writer of a version wins)."""
    await conn.execute(
        "INSERT INTO feature_flag_versions (flag_id, version, project_id, data, activity_id, "
        "user_id, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) "
        "ON CONFLICT (flag_id, version) DO NOTHING",
        flag["id"],
        flag["version"],
        project_id,
        json_text(flag),
        activity_id,
        user_id,
        now_ms,
    )


async def insert_scheduled_change(
    conn: asyncpg.Connection,
    project_id: int,
    flag_id: int,
    operation: Operation,
    payload: dict[str, Any],
    run_at_ms: int,
    created_by: int | None,
    now_ms: int,
) -> int:
    return int(
        await conn.fetchval(
            "INSERT INTO scheduled_changes (project_id, flag_id, operation, payload, run_at_ms, "
            "created_by, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            project_id,
            flag_id,
            operation.value,
            json_text(payload),
            run_at_ms,
            created_by,
            now_ms,
        )
    )


class PostgresAccounts:
    """Users, memberships, sessions, login attempts, personal keys and the activity log."""

    pool: asyncpg.Pool  # the store's (PostgresStore's property)

    # users ---------------------------------------------------------------------------------

    async def create_user(self, email: str, password_hash: str, now_ms: int) -> User:
        try:
            user_id = await self.pool.fetchval(
                "INSERT INTO users (email, password_hash, created_at_ms) VALUES ($1, $2, $3) "
                "RETURNING id",
                pg_text(email),
                password_hash,
                now_ms,
            )
        except asyncpg.UniqueViolationError:
            raise Conflict("email", "a user with this email exists already") from None
        return User(int(user_id), email, password_hash, now_ms)

    async def get_user(self, user_id: int) -> User | None:
        row = await self.pool.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE id = $1", user_id)
        return user_record(row) if row else None

    async def find_user_by_email(self, email: str) -> User | None:
        row = await self.pool.fetchrow(
            f"SELECT {USER_COLUMNS} FROM users WHERE email = $1", pg_text(email)
        )
        return user_record(row) if row else None

    async def count_users(self) -> int:
        return int(await self.pool.fetchval("SELECT COUNT(*) FROM users"))

    async def set_password_hash(self, user_id: int, password_hash: str) -> None:
        await self.pool.execute(
            "UPDATE users SET password_hash = $1 WHERE id = $2", password_hash, user_id
        )

    async def record_login(self, user_id: int, now_ms: int) -> None:
        await self.pool.execute(
            "UPDATE users SET last_login_ms = $1 WHERE id = $2", now_ms, user_id
        )

    # memberships ---------------------------------------------------------------------------

    async def set_membership(
        self, user_id: int, project_id: int, role: Role, now_ms: int
    ) -> Membership:
        created = await self.pool.fetchval(
            "INSERT INTO memberships (user_id, project_id, role, created_at_ms) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT (user_id, project_id) DO UPDATE SET role = "
            "excluded.role RETURNING created_at_ms",
            user_id,
            project_id,
            role.value,
            now_ms,
        )
        return Membership(user_id, project_id, role, int(created))

    async def get_membership(self, user_id: int, project_id: int) -> Membership | None:
        row = await self.pool.fetchrow(
            "SELECT user_id, project_id, role, created_at_ms FROM memberships "
            "WHERE user_id = $1 AND project_id = $2",
            user_id,
            project_id,
        )
        return Membership(row[0], row[1], Role(row[2]), row[3]) if row else None

    async def list_memberships(self, user_id: int) -> list[Membership]:
        rows = await self.pool.fetch(
            "SELECT user_id, project_id, role, created_at_ms FROM memberships WHERE user_id = $1 "
            "ORDER BY project_id",
            user_id,
        )
        return [Membership(r[0], r[1], Role(r[2]), r[3]) for r in rows]

    async def list_members(self, project_id: int) -> list[tuple[User, Membership]]:
        cols = ", ".join(f"u.{c.strip()}" for c in USER_COLUMNS.split(","))
        rows = await self.pool.fetch(
            f"SELECT {cols}, m.role, m.created_at_ms FROM memberships m "
            "JOIN users u ON u.id = m.user_id WHERE m.project_id = $1 ORDER BY u.email",
            project_id,
        )
        return [(user_record(r), Membership(r[0], project_id, Role(r[7]), r[8])) for r in rows]

    async def remove_membership(self, user_id: int, project_id: int) -> bool:
        status = await self.pool.execute(
            "DELETE FROM memberships WHERE user_id = $1 AND project_id = $2", user_id, project_id
        )
        return status != "DELETE 0"

    async def change_membership(
        self,
        user_id: int,
        project_id: int,
        role: Role | None,
        now_ms: int,
        source: ChangeSource | None = None,
    ) -> Membership | None:
        async with self.pool.acquire() as conn, conn.transaction():
            # Lock the project's admin rows first: a concurrent demotion waits, then sees the
            # committed roles (read committed re-checks a locked row's role).
            admins = await conn.fetch(
                "SELECT user_id FROM memberships WHERE project_id = $1 AND role = 'admin' "
                "ORDER BY user_id FOR UPDATE",
                project_id,
            )
            row = await conn.fetchrow(
                "SELECT u.email, m.role, m.created_at_ms FROM users u LEFT JOIN memberships m "
                "ON m.user_id = u.id AND m.project_id = $1 WHERE u.id = $2",
                project_id,
                user_id,
            )
            if row is None:
                raise NotFound(f"user {user_id}")
            email, raw_role, created = row
            current = Role(raw_role) if raw_role else None
            others = sum(1 for a in admins if a[0] != user_id)
            if leaves_no_admin(current, role, others):
                raise Conflict.last_admin()
            if role is None and current is None:
                return None
            if role is None:
                await conn.execute(
                    "DELETE FROM memberships WHERE user_id = $1 AND project_id = $2",
                    user_id,
                    project_id,
                )
            else:
                created = await conn.fetchval(
                    "INSERT INTO memberships (user_id, project_id, role, created_at_ms) "
                    "VALUES ($1, $2, $3, $4) ON CONFLICT (user_id, project_id) DO UPDATE SET "
                    "role = excluded.role RETURNING created_at_ms",
                    user_id,
                    project_id,
                    role.value,
                    now_ms,
                )
            await write_change(
                conn,
                project_id=project_id,
                scope=Scope.MEMBERSHIP,
                item_id=user_id,
                source=source,
                before=membership_detail(email, current),
                after=membership_detail(email, role),
                now_ms=now_ms,
            )
        return None if role is None else Membership(user_id, project_id, role, int(created))

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
        session_id = await self.pool.fetchval(
            "INSERT INTO sessions (user_id, token_hash, created_at_ms, last_seen_ms, "
            "expires_at_ms, ip, user_agent) VALUES ($1, $2, $3, $3, $4, $5, $6) RETURNING id",
            user_id,
            token_hash,
            created_at_ms,
            expires_at_ms,
            pg_text(ip),
            pg_text(user_agent),
        )
        return Session(
            int(session_id), user_id, token_hash, created_at_ms, created_at_ms, expires_at_ms,
            ip, user_agent,
        )  # fmt: skip

    async def find_session(self, token_hash: str) -> Session | None:
        row = await self.pool.fetchrow(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE token_hash = $1", token_hash
        )
        return session_record(row) if row else None

    async def touch_session(self, session_id: int, now_ms: int) -> None:
        await self.pool.execute(
            "UPDATE sessions SET last_seen_ms = $1 WHERE id = $2", now_ms, session_id
        )

    async def delete_session(self, token_hash: str) -> None:
        await self.pool.execute("DELETE FROM sessions WHERE token_hash = $1", token_hash)

    async def delete_user_sessions(self, user_id: int, keep_session_id: int | None) -> int:
        status = await self.pool.execute(
            "DELETE FROM sessions WHERE user_id = $1 AND id IS DISTINCT FROM $2",
            user_id,
            keep_session_id,
        )
        return int(status.split()[-1])

    async def delete_expired_sessions(self, now_ms: int, idle_before_ms: int) -> int:
        status = await self.pool.execute(
            "DELETE FROM sessions WHERE expires_at_ms <= $1 OR last_seen_ms < $2",
            now_ms,
            idle_before_ms,
        )
        return int(status.split()[-1])

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
        label = pg_text(label)
        info = ApiKeyInfo(
            0, project_id, label, key_prefix(secret), keys.mask_key(secret), now_ms, user_id
        )
        async with self.pool.acquire() as conn, conn.transaction():
            key_id = await conn.fetchval(
                "INSERT INTO personal_api_keys (project_id, label, secure_value, mask, "
                "created_at, user_id, prefix, created_at_ms) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                project_id,
                label,
                keys.hash_key(secret),
                info.mask,
                now_iso(),
                user_id,
                info.prefix,
                now_ms,
            )
            await write_change(
                conn,
                project_id=project_id,
                scope=Scope.PERSONAL_API_KEY,
                item_id=key_id,
                source=source,
                before=None,
                after={"name": label, "prefix": info.prefix, "user_id": user_id},
                now_ms=now_ms,
            )
        return msgspec.structs.replace(info, id=int(key_id)), secret

    async def list_keys(self, project_id: int, user_id: int | None) -> list[ApiKeyInfo]:
        if user_id is None:
            rows = await self.pool.fetch(
                f"SELECT {KEY_COLUMNS} FROM personal_api_keys WHERE project_id = $1 ORDER BY id",
                project_id,
            )
        else:
            rows = await self.pool.fetch(
                f"SELECT {KEY_COLUMNS} FROM personal_api_keys WHERE project_id = $1 "
                "AND user_id = $2 ORDER BY id",
                project_id,
                user_id,
            )
        return [key_record(r) for r in rows]

    async def find_key(self, secret: str) -> ApiKeyInfo | None:
        row = await self.pool.fetchrow(
            f"SELECT {KEY_COLUMNS} FROM personal_api_keys WHERE secure_value = $1",
            keys.hash_key(secret),
        )
        return key_record(row) if row else None

    async def revoke_key(
        self, project_id: int, key_id: int, now_ms: int, source: ChangeSource | None = None
    ) -> ApiKeyInfo | None:
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "UPDATE personal_api_keys SET revoked_at_ms = $1 WHERE project_id = $2 "
                "AND id = $3 AND revoked_at_ms IS NULL RETURNING label, prefix",
                now_ms,
                project_id,
                key_id,
            )
            if row is not None:
                await write_change(
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
            found = await conn.fetchrow(
                f"SELECT {KEY_COLUMNS} FROM personal_api_keys WHERE project_id = $1 AND id = $2",
                project_id,
                key_id,
            )
        return key_record(found) if found else None

    async def mark_key_used(self, key_id: int, now_ms: int) -> None:
        await self.pool.execute(
            "UPDATE personal_api_keys SET last_used_ms = $1 WHERE id = $2", now_ms, key_id
        )

    # login attempts ------------------------------------------------------------------------

    async def record_login_attempt(self, attempt: LoginAttempt) -> None:
        await self.pool.execute(
            "INSERT INTO login_attempts (email, ip, at_ms, succeeded) VALUES ($1, $2, $3, $4)",
            pg_text(attempt.email),
            pg_text(attempt.ip),
            attempt.at_ms,
            attempt.succeeded,
        )

    async def recent_login_attempts(self, email: str, ip: str, since_ms: int) -> list[LoginAttempt]:
        rows = await self.pool.fetch(
            "SELECT email, ip, at_ms, succeeded FROM login_attempts "
            "WHERE (email = $1 OR ip = $2) AND at_ms >= $3 ORDER BY at_ms, id",
            pg_text(email),
            pg_text(ip),
            since_ms,
        )
        return [LoginAttempt(r[0], r[1], r[2], bool(r[3])) for r in rows]

    async def prune_login_attempts(self, before_ms: int) -> int:
        status = await self.pool.execute("DELETE FROM login_attempts WHERE at_ms < $1", before_ms)
        return int(status.split()[-1])

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
        where, args = activity_filter(project_id, scope, item_id, user_id, before_id, "$")
        n = len(args)
        rows = await self.pool.fetch(
            f"SELECT {ACTIVITY_COLUMNS} FROM activity_log a LEFT JOIN users u ON u.id = a.user_id "
            f"WHERE {where} ORDER BY a.id DESC LIMIT ${n + 1} OFFSET ${n + 2}",
            *args,
            limit,
            offset,
        )
        return [activity_record(r) for r in rows]

    async def count_activity(self, project_id: int, scope: Scope, item_id: str | None) -> int:
        where, args = activity_filter(project_id, scope, item_id, None, None, "$")
        return int(
            await self.pool.fetchval(f"SELECT COUNT(*) FROM activity_log a WHERE {where}", *args)
        )

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
        async with self.pool.acquire() as conn:
            change_id = await insert_scheduled_change(
                conn, project_id, flag_id, operation, payload, run_at_ms, created_by, now_ms
            )
        return ScheduledChange(
            int(change_id), project_id, flag_id, operation, payload, run_at_ms, created_by, now_ms
        )

    async def list_scheduled_changes(
        self, project_id: int, flag_id: int | None
    ) -> list[ScheduledChange]:
        rows = await self.pool.fetch(
            f"SELECT {SCHEDULED_COLUMNS} FROM scheduled_changes WHERE project_id = $1 "
            "AND ($2::bigint IS NULL OR flag_id = $2) ORDER BY run_at_ms, id",
            project_id,
            flag_id,
        )
        return [scheduled_record(r) for r in rows]

    async def delete_scheduled_change(self, project_id: int, change_id: int) -> bool:
        """Cancel a change that has not run yet."""
        status = await self.pool.execute(
            "DELETE FROM scheduled_changes WHERE project_id = $1 AND id = $2 "
            "AND executed_at_ms IS NULL",
            project_id,
            change_id,
        )
        return status != "DELETE 0"

    async def claim_due_changes(self, now_ms: int, limit: int) -> list[ScheduledChange]:
        """The due changes, oldest first, marked as executed so no other node runs them
        (rows another node is claiming are skipped, not waited for)."""
        rows = await self.pool.fetch(
            "WITH due AS (SELECT id FROM scheduled_changes WHERE executed_at_ms IS NULL "
            "AND run_at_ms <= $1 ORDER BY run_at_ms, id LIMIT $2 FOR UPDATE SKIP LOCKED) "
            "UPDATE scheduled_changes s SET executed_at_ms = $1 FROM due WHERE s.id = due.id "
            f"RETURNING {', '.join('s.' + c.strip() for c in SCHEDULED_COLUMNS.split(','))}",
            now_ms,
            limit,
        )
        return sorted((scheduled_record(r) for r in rows), key=lambda c: (c.run_at_ms, c.id))

    async def fail_scheduled_change(self, change_id: int, failure: str) -> None:
        await self.pool.execute(
            "UPDATE scheduled_changes SET failure = $1 WHERE id = $2", failure, change_id
        )

    async def flag_versions(self, project_id: int, flag_id: int) -> list[FlagVersion]:
        rows = await self.pool.fetch(
            "SELECT version, data, created_at_ms, user_id, activity_id FROM feature_flag_versions "
            "WHERE project_id = $1 AND flag_id = $2 ORDER BY version",
            project_id,
            flag_id,
        )
        return [FlagVersion(r[0], _decode(r[1]), r[2], r[3], r[4]) for r in rows]
