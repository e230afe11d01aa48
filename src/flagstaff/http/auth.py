"""Personal API key authentication for the management and definitions endpoints."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request

from flagstaff.http.errors import ApiError
from flagstaff.store.base import PersonalKey, Store


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
    key = await store.find_personal_key(bearer_token(headers))
    if key is None:
        raise ApiError(401, "authentication_failed", "the personal API key is not valid")
    return key


def personal_key_auth(store: Store) -> Callable[[Request], Awaitable[PersonalKey]]:
    async def authenticate(request: Request) -> PersonalKey:
        return await check_personal_key(store, request.headers)

    return authenticate
