"""Who is calling the management API: a Bearer personal key or a console session (cookie plus
CSRF token), resolved to one :class:`Principal` so that both pass the same role checks.

``http/auth.py`` wraps :func:`authenticate` for the management API; ``http/admin.py`` calls
:func:`require` once per request.
"""

from __future__ import annotations

from collections.abc import Mapping

from flagstaff.accounts import api_keys, cookies, csrf, sessions
from flagstaff.accounts import login as console_session
from flagstaff.accounts.records import Role
from flagstaff.accounts.roles import Action, AuthMethod, Principal, permission_problem
from flagstaff.accounts.store import AccountStore
from flagstaff.application.errors import ApiError


def _requested_project(raw: str | None) -> int | None:
    if raw is None or raw == "@current":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ApiError(404, "not_found", "no such project") from None


async def principal_from_key(
    accounts: AccountStore, secret: str, project: str | None, now_ms: int
) -> Principal:
    info = await accounts.find_key(secret)
    if info is None or info.revoked:
        raise ApiError(401, "authentication_failed", "the personal API key is not valid")
    requested = _requested_project(project)
    if requested is not None and requested != info.project_id:
        raise ApiError(404, "not_found", "no such project")
    role = Role.ADMIN  # keys made before accounts existed act as their project's admin
    email = ""
    if info.user_id is not None:
        membership = await accounts.get_membership(info.user_id, info.project_id)
        user = await accounts.get_user(info.user_id)
        if membership is None or user is None or not user.is_active:
            raise ApiError(401, "authentication_failed", "the key's user has no access any more")
        role, email = Role(membership.role), user.email
    if api_keys.needs_last_used_update(info, now_ms):
        await accounts.mark_key_used(info.id, now_ms)
    return Principal(
        project_id=info.project_id,
        role=role,
        method=AuthMethod.PERSONAL_KEY,
        user_id=info.user_id,
        email=email,
        key_id=info.id,
    )


async def principal_from_session(
    accounts: AccountStore,
    token: str,
    method: str,
    headers: Mapping[str, str],
    host: str,
    project: str | None,
    now_ms: int,
    policy: sessions.SessionPolicy = sessions.DEFAULT_POLICY,
) -> Principal:
    auth = await console_session.resolve(accounts, token, now_ms, policy)
    if auth is None:
        raise ApiError(401, "not_authenticated", "the session has ended; log in again")
    problem = console_session.csrf_problem(
        method, headers, host, token, headers.get(csrf.CSRF_HEADER)
    )
    if problem is not None:
        raise ApiError(403, "csrf_failed", problem)
    memberships = await accounts.list_memberships(auth.user.id)
    principal = console_session.principal_for(auth, memberships, _requested_project(project))
    if principal is None:
        raise ApiError(404, "not_found", "no such project")
    return principal


async def authenticate(
    accounts: AccountStore,
    method: str,
    headers: Mapping[str, str],
    cookie_jar: Mapping[str, str],
    host: str,
    project: str | None,
    now_ms: int,
) -> Principal:
    """The caller of a management API request. A Bearer key wins over a cookie (scripts send
    no cookies; a browser sending both means a key was pasted into a console request)."""
    raw = headers.get("authorization", "")
    scheme, _, value = raw.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return await principal_from_key(accounts, value.strip(), project, now_ms)
    token = cookie_jar.get(cookies.SESSION_COOKIE)
    if token:
        return await principal_from_session(accounts, token, method, headers, host, project, now_ms)
    raise ApiError(
        401,
        "not_authenticated",
        "send a personal API key as 'Authorization: Bearer phx_...' or log in to the console",
    )


def require(principal: Principal, action: Action) -> None:
    """Refuse with 403 what the principal's role does not allow."""
    problem = permission_problem(principal, action)
    if problem is not None:
        raise ApiError(403, "permission_denied", problem)
