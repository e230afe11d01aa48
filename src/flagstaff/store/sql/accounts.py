"""The :class:`~flagstaff.accounts.store.AccountStore` on either engine: users, memberships,
sessions, login attempts and personal API keys (a mixin of both stores)."""

from __future__ import annotations

from typing import Protocol

import msgspec

from flagstaff.accounts import keys
from flagstaff.accounts.api_keys import key_prefix
from flagstaff.accounts.records import ApiKeyInfo, LoginAttempt, Membership, Role, Session, User
from flagstaff.accounts.roles import leaves_no_admin
from flagstaff.activity.records import Activity, ChangeSource, Scope
from flagstaff.store.account_rows import (
    KEY_COLUMNS,
    SESSION_COLUMNS,
    USER_COLUMNS,
    key_record,
    membership_detail,
    session_record,
    user_record,
)
from flagstaff.store.records import Conflict, NotFound
from flagstaff.store.rows import now_iso
from flagstaff.store.sql.activity import ActivityMethods, write_change
from flagstaff.store.sql.db import Db, Row, Tx, UniqueViolation, insert_id

_REVOKE_KEY = (
    "UPDATE personal_api_keys SET revoked_at_ms = $1 WHERE project_id = $2 AND id = $3 "
    "AND revoked_at_ms IS NULL RETURNING label, prefix"
)
_MEMBERSHIP_COLUMNS = "user_id, project_id, role, created_at_ms"


def _membership(row: Row) -> Membership:
    return Membership(row[0], row[1], Role(row[2]), row[3])


class Accounts(ActivityMethods, Protocol):
    """Users, memberships, sessions, login attempts, personal keys and the activity log."""

    sql: Db

    # users ---------------------------------------------------------------------------------

    async def create_user(self, email: str, password_hash: str, now_ms: int) -> User:
        try:
            user_id = await self.sql.write(
                lambda tx: tx.fetchval(
                    "INSERT INTO users (email, password_hash, created_at_ms) VALUES ($1, $2, $3) "
                    "RETURNING id",
                    email,
                    password_hash,
                    now_ms,
                )
            )
        except UniqueViolation:
            raise Conflict("email", "a user with this email exists already") from None
        return User(int(user_id), email, password_hash, now_ms)

    async def get_user(self, user_id: int) -> User | None:
        row = await self.sql.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE id = $1", user_id)
        return user_record(row) if row else None

    async def find_user_by_email(self, email: str) -> User | None:
        row = await self.sql.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE email = $1", email)
        return user_record(row) if row else None

    async def count_users(self) -> int:
        return int(await self.sql.fetchval("SELECT COUNT(*) FROM users"))

    async def set_password_hash(self, user_id: int, password_hash: str) -> None:
        await self.sql.execute(
            "UPDATE users SET password_hash = $1 WHERE id = $2", password_hash, user_id
        )

    async def record_login(self, user_id: int, now_ms: int) -> None:
        await self.sql.execute("UPDATE users SET last_login_ms = $1 WHERE id = $2", now_ms, user_id)

    # memberships ---------------------------------------------------------------------------

    async def set_membership(
        self, user_id: int, project_id: int, role: Role, now_ms: int
    ) -> Membership:
        created = await self.sql.write(
            lambda tx: tx.fetchval(
                "INSERT INTO memberships (user_id, project_id, role, created_at_ms) "
                "VALUES ($1, $2, $3, $4) ON CONFLICT (user_id, project_id) DO UPDATE SET role = "
                "excluded.role RETURNING created_at_ms",
                user_id,
                project_id,
                role.value,
                now_ms,
            )
        )
        return Membership(user_id, project_id, role, int(created))

    async def get_membership(self, user_id: int, project_id: int) -> Membership | None:
        row = await self.sql.fetchrow(
            f"SELECT {_MEMBERSHIP_COLUMNS} FROM memberships WHERE user_id = $1 AND project_id = $2",
            user_id,
            project_id,
        )
        return _membership(row) if row else None

    async def list_memberships(self, user_id: int) -> list[Membership]:
        rows = await self.sql.fetch(
            f"SELECT {_MEMBERSHIP_COLUMNS} FROM memberships WHERE user_id = $1 ORDER BY project_id",
            user_id,
        )
        return [_membership(r) for r in rows]

    async def list_members(self, project_id: int) -> list[tuple[User, Membership]]:
        cols = ", ".join(f"u.{c.strip()}" for c in USER_COLUMNS.split(","))
        rows = await self.sql.fetch(
            f"SELECT {cols}, m.role, m.created_at_ms FROM memberships m "
            "JOIN users u ON u.id = m.user_id WHERE m.project_id = $1 ORDER BY u.email",
            project_id,
        )
        n = len(USER_COLUMNS.split(","))
        return [(user_record(r), Membership(r[0], project_id, Role(r[n]), r[n + 1])) for r in rows]

    async def change_membership(
        self,
        user_id: int,
        project_id: int,
        role: Role | None,
        now_ms: int,
        source: ChangeSource | None = None,
    ) -> Membership | None:
        async def write(tx: Tx) -> Membership | None:
            # Lock the project's admin rows first (PostgreSQL): a concurrent demotion waits,
            # then sees the committed roles (read committed re-checks a locked row's role).
            admins = await tx.fetch(
                "SELECT user_id FROM memberships WHERE project_id = $1 AND role = 'admin' "
                "ORDER BY user_id FOR UPDATE",
                project_id,
            )
            row = await tx.fetchrow(
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
                await tx.execute(
                    "DELETE FROM memberships WHERE user_id = $1 AND project_id = $2",
                    user_id,
                    project_id,
                )
            else:
                created = await tx.fetchval(
                    "INSERT INTO memberships (user_id, project_id, role, created_at_ms) "
                    "VALUES ($1, $2, $3, $4) ON CONFLICT (user_id, project_id) DO UPDATE SET "
                    "role = excluded.role RETURNING created_at_ms",
                    user_id,
                    project_id,
                    role.value,
                    now_ms,
                )
            await write_change(
                tx, project_id, Scope.MEMBERSHIP, user_id, source,
                membership_detail(email, current), membership_detail(email, role), now_ms,
            )  # fmt: skip
            return None if role is None else Membership(user_id, project_id, role, int(created))

        return await self.sql.write(write)

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
        session_id = await self.sql.write(
            lambda tx: tx.fetchval(
                "INSERT INTO sessions (user_id, token_hash, created_at_ms, last_seen_ms, "
                "expires_at_ms, ip, user_agent) VALUES ($1, $2, $3, $3, $4, $5, $6) RETURNING id",
                user_id,
                token_hash,
                created_at_ms,
                expires_at_ms,
                ip,
                user_agent,
            )
        )
        return Session(
            int(session_id), user_id, token_hash, created_at_ms, created_at_ms, expires_at_ms,
            ip, user_agent,
        )  # fmt: skip

    async def find_session(self, token_hash: str) -> Session | None:
        row = await self.sql.fetchrow(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE token_hash = $1", token_hash
        )
        return session_record(row) if row else None

    async def touch_session(self, session_id: int, now_ms: int) -> None:
        await self.sql.execute(
            "UPDATE sessions SET last_seen_ms = $1 WHERE id = $2", now_ms, session_id
        )

    async def delete_session(self, token_hash: str) -> None:
        await self.sql.execute("DELETE FROM sessions WHERE token_hash = $1", token_hash)

    async def delete_user_sessions(self, user_id: int, keep_session_id: int | None) -> int:
        return await self.sql.execute(
            "DELETE FROM sessions WHERE user_id = $1 AND id IS DISTINCT FROM $2",
            user_id,
            keep_session_id,
        )

    async def delete_expired_sessions(self, now_ms: int, idle_before_ms: int) -> int:
        return await self.sql.execute(
            "DELETE FROM sessions WHERE expires_at_ms <= $1 OR last_seen_ms < $2",
            now_ms,
            idle_before_ms,
        )

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

        async def write(tx: Tx) -> int:
            key_id = await insert_id(
                tx,
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
                tx, project_id, Scope.PERSONAL_API_KEY, key_id, source, None,
                {"name": label, "prefix": info.prefix, "user_id": user_id}, now_ms,
            )  # fmt: skip
            return key_id

        key_id = await self.sql.write(write)
        return msgspec.structs.replace(info, id=key_id), secret

    async def list_keys(self, project_id: int, user_id: int | None) -> list[ApiKeyInfo]:
        sql = f"SELECT {KEY_COLUMNS} FROM personal_api_keys WHERE project_id = $1 "
        sql += "AND ($2::bigint IS NULL OR user_id = $2) ORDER BY id"
        return [key_record(r) for r in await self.sql.fetch(sql, project_id, user_id)]

    async def find_key(self, secret: str) -> ApiKeyInfo | None:
        row = await self.sql.fetchrow(
            f"SELECT {KEY_COLUMNS} FROM personal_api_keys WHERE secure_value = $1",
            keys.hash_key(secret),
        )
        return key_record(row) if row else None

    async def revoke_key(
        self, project_id: int, key_id: int, now_ms: int, source: ChangeSource | None = None
    ) -> ApiKeyInfo | None:
        async def write(tx: Tx) -> ApiKeyInfo | None:
            row = await tx.fetchrow(_REVOKE_KEY, now_ms, project_id, key_id)
            if row is not None:
                revoked = ChangeSource(
                    actor=(source or ChangeSource()).actor, activity=Activity.REVOKED
                )
                name, prefix = row[0], row[1]
                await write_change(
                    tx, project_id, Scope.PERSONAL_API_KEY, key_id, revoked,
                    {"name": name, "prefix": prefix, "revoked": False},
                    {"name": name, "prefix": prefix, "revoked": True}, now_ms,
                )  # fmt: skip
            found = await tx.fetchrow(
                f"SELECT {KEY_COLUMNS} FROM personal_api_keys WHERE project_id = $1 AND id = $2",
                project_id,
                key_id,
            )
            return key_record(found) if found else None

        return await self.sql.write(write)

    async def mark_key_used(self, key_id: int, now_ms: int) -> None:
        await self.sql.execute(
            "UPDATE personal_api_keys SET last_used_ms = $1 WHERE id = $2", now_ms, key_id
        )

    # login attempts ------------------------------------------------------------------------

    async def record_login_attempt(self, attempt: LoginAttempt) -> None:
        await self.sql.execute(
            "INSERT INTO login_attempts (email, ip, at_ms, succeeded) VALUES ($1, $2, $3, $4)",
            attempt.email,
            attempt.ip,
            attempt.at_ms,
            attempt.succeeded,
        )

    async def recent_login_attempts(self, email: str, ip: str, since_ms: int) -> list[LoginAttempt]:
        rows = await self.sql.fetch(
            "SELECT email, ip, at_ms, succeeded FROM login_attempts "
            "WHERE (email = $1 OR ip = $2) AND at_ms >= $3 ORDER BY at_ms, id",
            email,
            ip,
            since_ms,
        )
        return [LoginAttempt(r[0], r[1], r[2], bool(r[3])) for r in rows]

    async def prune_login_attempts(self, before_ms: int) -> int:
        return await self.sql.execute("DELETE FROM login_attempts WHERE at_ms < $1", before_ms)
