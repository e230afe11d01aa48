"""Single sign-on's storage on either engine: sign-ins waiting for the provider, users keyed
by (issuer, subject) with the role their groups give, and the activity records of logins,
refusals and ended sessions."""

from __future__ import annotations

from typing import Any, Protocol

from flagstaff.accounts.oidc import Identity, PendingLogin, SsoSync, is_lower
from flagstaff.accounts.records import Role, User
from flagstaff.activity.records import (
    SYSTEM,
    Activity,
    ActivityRecord,
    Actor,
    ChangeSource,
    Detail,
    Scope,
    Trigger,
)
from flagstaff.store.account_rows import USER_COLUMNS, membership_detail, user_record
from flagstaff.store.records import Conflict
from flagstaff.store.sql.activity import write_activity, write_change
from flagstaff.store.sql.db import Db, Tx

SSO_TRIGGER = "oidc_login"


def _trigger(issuer: str, **payload: Any) -> Trigger:
    return Trigger(job_type=SSO_TRIGGER, job_id=issuer, payload=payload)


async def _first_project(tx: Tx, wanted: int | None) -> int:
    if wanted is not None:
        return wanted
    found = await tx.fetchval("SELECT MIN(id) FROM projects")
    if found is None:
        raise Conflict("project", "there is no project to sign in to")
    return int(found)


async def _sso_user(tx: Tx, identity: Identity, now_ms: int) -> tuple[int, bool]:
    """The id of the provider's user (made now, or a local user of the same verified email
    linked now) and whether it was made. ``Conflict("email")`` when the email belongs to a
    user who cannot be linked (a break-glass user, or another provider's)."""
    row = await tx.fetchrow(
        "SELECT id, email FROM users WHERE oidc_issuer = $1 AND oidc_subject = $2",
        identity.issuer,
        identity.subject,
    )
    if row is not None:
        user_id = int(row[0])
        if identity.email and row[1] != identity.email:
            taken = await tx.fetchval("SELECT id FROM users WHERE email = $1", identity.email)
            if taken is None:
                await tx.execute(
                    "UPDATE users SET email = $1 WHERE id = $2", identity.email, user_id
                )
        return user_id, False
    email = identity.email or f"{identity.subject}@{_host(identity.issuer)}"
    local = await tx.fetchrow(
        "SELECT id, oidc_subject, break_glass FROM users WHERE email = $1", email
    )
    if local is not None:
        if local[1] is not None or bool(local[2]) or not identity.email_verified:
            raise Conflict(
                "email", f"the email {email} belongs to another account that is not linked"
            )
        await tx.execute(
            "UPDATE users SET oidc_issuer = $1, oidc_subject = $2 WHERE id = $3",
            identity.issuer,
            identity.subject,
            int(local[0]),
        )
        return int(local[0]), False
    user_id = await tx.fetchval(
        "INSERT INTO users (email, password_hash, first_name, created_at_ms, oidc_issuer, "
        "oidc_subject) VALUES ($1, '', $2, $3, $4, $5) RETURNING id",
        email,
        identity.name,
        now_ms,
        identity.issuer,
        identity.subject,
    )
    return int(user_id), True


def _host(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]


class SsoMethods(Protocol):
    sql: Db

    # sign-ins waiting for the provider -------------------------------------------------------

    async def create_oidc_login(self, state_hash: str, login: PendingLogin, now_ms: int) -> None:
        """Store a sign-in sent to the provider (and drop the ones that expired)."""

        async def write(tx: Tx) -> None:
            await tx.execute("DELETE FROM oidc_logins WHERE expires_at_ms <= $1", now_ms)
            await tx.execute(
                "INSERT INTO oidc_logins (state_hash, nonce, code_verifier, next_path, "
                "created_at_ms, expires_at_ms) VALUES ($1, $2, $3, $4, $5, $6)",
                state_hash,
                login.nonce,
                login.code_verifier,
                login.next_path,
                now_ms,
                login.expires_at_ms,
            )

        await self.sql.write(write)

    async def take_oidc_login(self, state_hash: str, now_ms: int) -> PendingLogin | None:
        """The sign-in of this state, deleted as it is read: a second callback with the same
        state finds nothing. None too once it expired."""
        row = await self.sql.write(
            lambda tx: tx.fetchrow(
                "DELETE FROM oidc_logins WHERE state_hash = $1 "
                "RETURNING nonce, code_verifier, next_path, expires_at_ms",
                state_hash,
            )
        )
        if row is None or int(row[3]) <= now_ms:
            return None
        return PendingLogin(row[0], row[1], row[2], int(row[3]))

    # users -----------------------------------------------------------------------------------

    async def set_break_glass(self, user_id: int) -> None:
        """Let the user log in by password when single sign-on is the only way in."""
        await self.sql.execute("UPDATE users SET break_glass = true WHERE id = $1", user_id)

    async def sync_sso_user(
        self, identity: Identity, role: Role | None, project_id: int | None, now_ms: int
    ) -> SsoSync:
        """Apply a verified sign-in: the user by (issuer, subject), made at first login; their
        role in the project set to what their groups give now, recorded in the activity log
        when it changed. ``role`` None (no longer allowed): the membership is removed, the user
        deactivated (sessions and personal keys refused) and their sessions deleted. Roles come
        from the provider, so the last-admin rule of the members page does not apply here;
        a break-glass admin is the way back in."""

        async def write(tx: Tx) -> SsoSync:
            project = await _first_project(tx, project_id)
            user_id, created = await _sso_user(tx, identity, now_ms)
            raw = await tx.fetchval(
                "SELECT role FROM memberships WHERE user_id = $1 AND project_id = $2",
                user_id,
                project,
            )
            previous = Role(raw) if raw else None
            source = ChangeSource(actor=SYSTEM, trigger=_trigger(identity.issuer))
            if role is None:
                await tx.execute(
                    "DELETE FROM memberships WHERE user_id = $1 AND project_id = $2",
                    user_id,
                    project,
                )
                await tx.execute("UPDATE users SET is_active = false WHERE id = $1", user_id)
                await tx.execute("DELETE FROM sessions WHERE user_id = $1", user_id)
            else:
                await tx.execute(
                    "UPDATE users SET is_active = true, last_login_ms = $1 WHERE id = $2",
                    now_ms,
                    user_id,
                )
                await tx.execute(
                    "INSERT INTO memberships (user_id, project_id, role, created_at_ms) "
                    "VALUES ($1, $2, $3, $4) ON CONFLICT (user_id, project_id) DO UPDATE SET "
                    "role = excluded.role",
                    user_id,
                    project,
                    role.value,
                    now_ms,
                )
            row = await tx.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE id = $1", user_id)
            user = user_record(row)
            if previous != role:
                await write_change(
                    tx, project, Scope.MEMBERSHIP, user_id, source,
                    membership_detail(user.email, previous), membership_detail(user.email, role),
                    now_ms,
                )  # fmt: skip
            if role is not None:
                await _write_user_event(
                    tx, project, user, Activity.LOGGED_IN, identity.issuer, now_ms,
                    role=role.value, created=created, lowered=is_lower(role, previous),
                )  # fmt: skip
            return SsoSync(user, project, previous, role, created)

        return await self.sql.write(write)

    async def record_sso_refusal(
        self,
        project_id: int | None,
        user: User | None,
        name: str,
        issuer: str,
        reason: str,
        now_ms: int,
    ) -> None:
        """The activity record of a refused sign-in (``name``: the email or subject, if known)."""

        async def write(tx: Tx) -> None:
            project = await _first_project(tx, project_id)
            actor = Actor(user_id=user.id, email=user.email) if user else SYSTEM
            await write_activity(
                tx,
                ActivityRecord(
                    project_id=project,
                    scope=Scope.USER,
                    item_id=str(user.id) if user else None,
                    activity=Activity.LOGIN_REFUSED,
                    actor=actor,
                    detail=Detail(name=name, trigger=_trigger(issuer, reason=reason)),
                    created_at_ms=now_ms,
                ),
            )

        try:
            await self.sql.write(write)
        except Conflict:  # no project yet: nothing to record it in
            return

    async def end_user_sessions(
        self, project_id: int, user_id: int, source: ChangeSource | None, now_ms: int
    ) -> int:
        """Delete every session of the user (an admin's "end sessions"), with its activity
        record; how many there were."""

        async def write(tx: Tx) -> int:
            ended = await tx.execute("DELETE FROM sessions WHERE user_id = $1", user_id)
            row = await tx.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE id = $1", user_id)
            actor = (source or ChangeSource()).actor
            await write_activity(
                tx,
                ActivityRecord(
                    project_id=project_id,
                    scope=Scope.USER,
                    item_id=str(user_id),
                    activity=Activity.SESSIONS_ENDED,
                    actor=actor,
                    detail=Detail(name=user_record(row).email if row else None),
                    created_at_ms=now_ms,
                ),
            )
            return ended

        return await self.sql.write(write)


async def _write_user_event(
    tx: Tx,
    project_id: int,
    user: User,
    activity: Activity,
    issuer: str,
    now_ms: int,
    **payload: Any,
) -> None:
    await write_activity(
        tx,
        ActivityRecord(
            project_id=project_id,
            scope=Scope.USER,
            item_id=str(user.id),
            activity=activity,
            actor=Actor(user_id=user.id, email=user.email),
            detail=Detail(name=user.email, trigger=_trigger(issuer, **payload)),
            created_at_ms=now_ms,
        ),
    )
