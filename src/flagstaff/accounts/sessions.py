"""Server-side session tokens: random secrets in the cookie, only their digest in storage.

A session ends at ``expires_at_ms`` (absolute lifetime from login) or after ``idle_timeout``
without a request, whichever comes first. ``last_seen_ms`` is written at most once per
``touch_interval`` so that reading pages does not turn every request into a write.
"""

from __future__ import annotations

import enum
import hashlib
import secrets

import msgspec

from flagstaff.accounts.records import Session
from flagstaff.common.units import DAY_MS

SESSION_TOKEN_BYTES = 32


class SessionPolicy(msgspec.Struct, frozen=True):
    lifetime_ms: int = 14 * DAY_MS
    idle_timeout_ms: int = 2 * DAY_MS
    touch_interval_ms: int = 60_000


DEFAULT_POLICY = SessionPolicy()


class SessionState(enum.StrEnum):
    VALID = "valid"
    EXPIRED = "expired"
    IDLE = "idle"


class NewSession(msgspec.Struct, frozen=True):
    """What login produces: ``token`` goes into the cookie once, ``token_hash`` into storage."""

    token: str
    token_hash: str
    created_at_ms: int
    expires_at_ms: int


def new_session_token() -> str:
    return secrets.token_urlsafe(SESSION_TOKEN_BYTES)


def hash_session_token(token: str) -> str:
    """The stored form of a session token. A fast digest is right here: the token is 256
    random bits, so there is nothing to brute-force, and it is looked up on every request."""
    return hashlib.sha256(token.encode()).hexdigest()


def start_session(now_ms: int, policy: SessionPolicy = DEFAULT_POLICY) -> NewSession:
    token = new_session_token()
    return NewSession(
        token=token,
        token_hash=hash_session_token(token),
        created_at_ms=now_ms,
        expires_at_ms=now_ms + policy.lifetime_ms,
    )


def session_state(
    session: Session, now_ms: int, policy: SessionPolicy = DEFAULT_POLICY
) -> SessionState:
    if now_ms >= session.expires_at_ms:
        return SessionState.EXPIRED
    if now_ms - session.last_seen_ms >= policy.idle_timeout_ms:
        return SessionState.IDLE
    return SessionState.VALID


def needs_touch(session: Session, now_ms: int, policy: SessionPolicy = DEFAULT_POLICY) -> bool:
    """Whether a request at ``now_ms`` should record itself as the session's last use."""
    return now_ms - session.last_seen_ms >= policy.touch_interval_ms
