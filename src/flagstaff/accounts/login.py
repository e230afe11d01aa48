"""Console sessions over the :class:`AccountStore`: login, the session behind a cookie, the CSRF
check of a state-changing request, logout. Shared by the console pages and (in the wiring pass)
the management API's session authentication, so both apply the same rules."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from flagstaff.accounts import csrf, passwords, sessions, throttle
from flagstaff.accounts.records import LoginAttempt, Membership, Role, Session, User
from flagstaff.accounts.roles import AuthMethod, Principal
from flagstaff.accounts.store import AccountStore
from flagstaff.accounts.users import normalize_email


class Authenticated(msgspec.Struct, frozen=True):
    """A request's valid session: its user, and the CSRF token its forms must send back."""

    user: User
    session: Session
    csrf_token: str


class LoginOutcome(msgspec.Struct, frozen=True):
    user: User | None = None
    session: sessions.NewSession | None = None
    error: str = ""
    status: int = 200  # 401 wrong credentials, 429 throttled
    retry_after_s: int = 0


WRONG_CREDENTIALS = "The email or password is not right."
PASSWORD_LOGIN_OFF = (
    "Password login is turned off here; use single sign-on. Only break-glass accounts may "
    "log in with a password."
)


async def log_in(
    store: AccountStore,
    email: str,
    password: str,
    ip: str,
    user_agent: str,
    now_ms: int,
    session_policy: sessions.SessionPolicy = sessions.DEFAULT_POLICY,
    throttle_policy: throttle.ThrottlePolicy = throttle.DEFAULT_THROTTLE,
    password_login_off: bool = False,
) -> LoginOutcome:
    """Check the credentials under the throttle; on success a new session is stored. With
    ``password_login_off`` (single sign-on only) a right password of a user who is not a
    break-glass user is refused all the same (403)."""
    email = normalize_email(email)
    recent = await store.recent_login_attempts(email, ip, now_ms - throttle_policy.window_ms)
    decision = throttle.LoginThrottle.from_attempts(recent, throttle_policy).check(
        email, ip, now_ms
    )
    if not decision.allowed:
        return LoginOutcome(
            error=f"Too many failed logins; try again in {decision.retry_after_s} seconds.",
            status=429,
            retry_after_s=decision.retry_after_s,
        )
    user = await store.find_user_by_email(email) if email else None
    if user is None or not user.is_active:
        passwords.burn_verification(password)
        await store.record_login_attempt(LoginAttempt(email, ip, now_ms, False))
        return LoginOutcome(error=WRONG_CREDENTIALS, status=401)
    verified = passwords.verify_password(user.password_hash, password)
    await store.record_login_attempt(LoginAttempt(email, ip, now_ms, verified.ok))
    if not verified.ok:
        return LoginOutcome(error=WRONG_CREDENTIALS, status=401)
    if password_login_off and not user.break_glass:
        return LoginOutcome(error=PASSWORD_LOGIN_OFF, status=403)
    if verified.new_hash is not None:
        await store.set_password_hash(user.id, verified.new_hash)
    new = sessions.start_session(now_ms, session_policy)
    await store.create_session(
        user.id, new.token_hash, new.created_at_ms, new.expires_at_ms, ip, user_agent[:400]
    )
    await store.record_login(user.id, now_ms)
    return LoginOutcome(user=user, session=new)


async def resolve(
    store: AccountStore,
    token: str | None,
    now_ms: int,
    policy: sessions.SessionPolicy = sessions.DEFAULT_POLICY,
) -> Authenticated | None:
    """The valid session named by the cookie's ``token``, or None. An ended session is
    deleted; a used one has its last use recorded (at most once per touch interval)."""
    if not token or len(token) > 200:
        return None
    token_hash = sessions.hash_session_token(token)
    session = await store.find_session(token_hash)
    if session is None:
        return None
    if sessions.session_state(session, now_ms, policy) is not sessions.SessionState.VALID:
        await store.delete_session(token_hash)
        return None
    user = await store.get_user(session.user_id)
    if user is None or not user.is_active:
        return None
    if sessions.needs_touch(session, now_ms, policy):
        await store.touch_session(session.id, now_ms)
        session = msgspec.structs.replace(session, last_seen_ms=now_ms)
    return Authenticated(user=user, session=session, csrf_token=csrf.csrf_token_for(token))


def csrf_problem(
    method: str, headers: Mapping[str, str], host: str, token: str, presented: str | None
) -> str | None:
    """Why a request made with session ``token`` is refused as cross-site, or None.
    Safe methods pass; others need the session's CSRF token and a same-origin Origin."""
    if not csrf.needs_csrf(method):
        return None
    if not csrf.origin_allowed(headers, host):
        return "the request comes from another origin"
    if not csrf.csrf_valid(token, presented):
        return f"send the page's CSRF token in the {csrf.CSRF_HEADER} header"
    return None


def principal_for(
    auth: Authenticated, memberships: list[Membership], project_id: int | None
) -> Principal | None:
    """The user's principal in ``project_id`` (None: their first project), or None when they
    are not a member of it."""
    ordered = sorted(memberships, key=lambda m: m.project_id)
    chosen = next((m for m in ordered if project_id is None or m.project_id == project_id), None)
    if chosen is None:
        return None
    return Principal(
        project_id=chosen.project_id,
        role=Role(chosen.role),
        method=AuthMethod.SESSION,
        user_id=auth.user.id,
        email=auth.user.email,
    )
