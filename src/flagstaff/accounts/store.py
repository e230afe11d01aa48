"""What the accounts need from storage. Each engine implements it next to the Store protocol.

Errors follow the Store's conventions: a duplicate email raises ``Conflict("email", ...)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from flagstaff.accounts.oidc import Identity, PendingLogin, SsoSync
from flagstaff.accounts.records import (
    ApiKeyInfo,
    LoginAttempt,
    Membership,
    Role,
    Session,
    User,
)

if TYPE_CHECKING:
    from flagstaff.activity.records import ChangeSource


class AccountStore(Protocol):
    # users
    async def create_user(self, email: str, password_hash: str, now_ms: int) -> User: ...

    async def get_user(self, user_id: int) -> User | None: ...

    async def find_user_by_email(self, email: str) -> User | None: ...

    async def count_users(self) -> int: ...

    async def set_password_hash(self, user_id: int, password_hash: str) -> None: ...

    async def record_login(self, user_id: int, now_ms: int) -> None: ...

    # memberships
    async def set_membership(
        self, user_id: int, project_id: int, role: Role, now_ms: int
    ) -> Membership: ...

    async def get_membership(self, user_id: int, project_id: int) -> Membership | None: ...

    async def list_memberships(self, user_id: int) -> list[Membership]: ...

    async def list_members(self, project_id: int) -> list[tuple[User, Membership]]: ...

    async def change_membership(
        self,
        user_id: int,
        project_id: int,
        role: Role | None,
        now_ms: int,
        source: ChangeSource | None = None,
    ) -> Membership | None:
        """Add the user with ``role``, change their role, or remove them (``role`` None), with
        its activity record (scope Membership), in one transaction. ``Conflict("role")`` when
        the project would be left without an admin (checked in the transaction, so two admins
        demoting each other at once cannot both succeed); ``NotFound`` for an unknown user.
        Returns the membership, or None once removed (or when there was none to remove)."""
        ...

    # sessions (looked up by the SHA-256 of the cookie's token)
    async def create_session(
        self,
        user_id: int,
        token_hash: str,
        created_at_ms: int,
        expires_at_ms: int,
        ip: str,
        user_agent: str,
    ) -> Session: ...

    async def find_session(self, token_hash: str) -> Session | None: ...

    async def touch_session(self, session_id: int, now_ms: int) -> None: ...

    async def delete_session(self, token_hash: str) -> None: ...

    async def delete_user_sessions(self, user_id: int, keep_session_id: int | None) -> int:
        """Log a user out everywhere (after a password change, keeping the current session)."""
        ...

    async def delete_expired_sessions(self, now_ms: int, idle_before_ms: int) -> int: ...

    # personal API keys (the secret is hashed by the store, as today)
    async def create_user_key(
        self,
        project_id: int,
        user_id: int | None,
        label: str,
        now_ms: int,
        source: ChangeSource | None = None,
    ) -> tuple[ApiKeyInfo, str]:
        """A new key and its secret; the secret is returned only here."""
        ...

    async def list_keys(self, project_id: int, user_id: int | None) -> list[ApiKeyInfo]:
        """The project's keys, or one user's keys when ``user_id`` is given."""
        ...

    async def find_key(self, secret: str) -> ApiKeyInfo | None:
        """The key with this secret, revoked ones included (the caller refuses them)."""
        ...

    async def revoke_key(
        self, project_id: int, key_id: int, now_ms: int, source: ChangeSource | None = None
    ) -> ApiKeyInfo | None: ...

    async def mark_key_used(self, key_id: int, now_ms: int) -> None: ...

    # login attempts, for throttling shared by every node
    async def record_login_attempt(self, attempt: LoginAttempt) -> None: ...

    async def recent_login_attempts(self, email: str, ip: str, since_ms: int) -> list[LoginAttempt]:
        """Attempts for ``email`` or from ``ip`` at or after ``since_ms``, oldest first."""
        ...

    async def prune_login_attempts(self, before_ms: int) -> int: ...

    # single sign-on (store/sql/sso.py)
    async def set_break_glass(self, user_id: int) -> None: ...

    async def create_oidc_login(
        self, state_hash: str, login: PendingLogin, now_ms: int
    ) -> None: ...

    async def take_oidc_login(self, state_hash: str, now_ms: int) -> PendingLogin | None: ...

    async def sync_sso_user(
        self, identity: Identity, role: Role | None, project_id: int | None, now_ms: int
    ) -> SsoSync: ...

    async def record_sso_refusal(
        self,
        project_id: int | None,
        user: User | None,
        name: str,
        issuer: str,
        reason: str,
        now_ms: int,
    ) -> None: ...

    async def end_user_sessions(
        self, project_id: int, user_id: int, source: ChangeSource | None, now_ms: int
    ) -> int: ...
