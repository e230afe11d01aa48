"""Typed records exchanged between the accounts logic, storage and the HTTP layer."""

from __future__ import annotations

import enum

import msgspec


class Role(enum.StrEnum):
    """A user's role in one project. Ordered: each role can do what the ones below it can."""

    VIEWER = "viewer"
    EDITOR = "editor"
    ADMIN = "admin"


class User(msgspec.Struct, frozen=True):
    id: int
    email: str
    password_hash: str
    created_at_ms: int
    is_active: bool = True
    first_name: str = ""
    last_login_ms: int | None = None
    break_glass: bool = False
    """Made by ``flagstaff user create --break-glass``: may log in by password when single
    sign-on is the only way in (``FLAGSTAFF_OIDC_ONLY``)."""
    oidc_issuer: str | None = None
    """The provider that signed this user in (single sign-on); None for a local user."""


class Membership(msgspec.Struct, frozen=True):
    user_id: int
    project_id: int
    role: Role
    created_at_ms: int


class Session(msgspec.Struct, frozen=True):
    """A server-side session. Only the SHA-256 of the cookie's token is stored (``token_hash``)."""

    id: int
    user_id: int
    token_hash: str
    created_at_ms: int
    last_seen_ms: int
    expires_at_ms: int
    ip: str = ""
    user_agent: str = ""


class ApiKeyInfo(msgspec.Struct, frozen=True):
    """A personal API key as listed: never its secret, only what identifies it."""

    id: int
    project_id: int
    label: str
    prefix: str
    mask: str
    created_at_ms: int
    user_id: int | None = None
    last_used_ms: int | None = None
    revoked_at_ms: int | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at_ms is not None


class LoginAttempt(msgspec.Struct, frozen=True):
    email: str
    ip: str
    at_ms: int
    succeeded: bool
