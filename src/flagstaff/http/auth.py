"""Authentication for the management and definitions endpoints.

The management API resolves every request to one :class:`~flagstaff.accounts.roles.Principal`
(a Bearer personal key or a console session with its CSRF token, see
:mod:`flagstaff.http.principal`); the definitions endpoint takes a personal key only.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request

from flagstaff.accounts.roles import Principal
from flagstaff.accounts.store import AccountStore
from flagstaff.application.errors import ApiError
from flagstaff.http import principal
from flagstaff.store.base import PersonalKey, Store

Authenticate = Callable[[Request], Awaitable[Principal]]


def bearer_token(headers: Mapping[str, str]) -> str:
    raw = headers.get("authorization", "")
    scheme, _, value = raw.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise ApiError(
            401,
            "not_authenticated",
            "send a personal API key as 'Authorization: Bearer phx_...'",
        )
    return value.strip()


async def check_personal_key(store: Store, headers: Mapping[str, str]) -> PersonalKey:
    """A valid (not revoked) personal key from the Authorization header, or 401."""
    key = await store.find_personal_key(bearer_token(headers))
    if key is None:
        raise ApiError(401, "authentication_failed", "the personal API key is not valid")
    return key


def principal_auth(accounts: AccountStore, clock: Callable[[], float] = time.time) -> Authenticate:
    """The management API's authentication: a key or a session, checked on every request
    (a revoked key or an ended session is refused on the next request)."""

    async def authenticate(request: Request) -> Principal:
        return await principal.authenticate(
            accounts,
            request.method,
            request.headers,
            request.cookies,
            request.url.netloc,
            request.path_params.get("project_id"),
            int(clock() * 1000),
        )

    return authenticate
