"""One principal for both ways into the management API: Bearer personal keys and sessions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flagstaff.accounts import csrf, sessions
from flagstaff.accounts.records import Role
from flagstaff.accounts.roles import Action, AuthMethod
from flagstaff.application.errors import ApiError
from flagstaff.http.principal import authenticate, require
from tests.unit.console_fakes import MemoryAccounts

NOW = 1_800_000_000_000
HOST = "flags.example.com"


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _setup(role: Role) -> tuple[MemoryAccounts, int]:
    accounts = MemoryAccounts()

    async def go() -> int:
        user = await accounts.create_user("ada@example.com", "hash", 0)
        await accounts.set_membership(user.id, 1, role, 0)
        return user.id

    return accounts, _run(go())


def _auth(
    accounts: MemoryAccounts,
    method: str = "GET",
    project: str | None = "@current",
    headers: dict[str, str] | None = None,
    cookies: dict[str, str] | None = None,
) -> Any:
    return _run(authenticate(accounts, method, headers or {}, cookies or {}, HOST, project, NOW))


def _error(call: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        call()
    return info.value


def test_keys_carry_their_users_role_and_revocation_takes_effect_at_once() -> None:
    accounts, user_id = _setup(Role.VIEWER)
    info, secret = _run(accounts.create_user_key(1, user_id, "ci", 0))
    bearer = {"authorization": f"Bearer {secret}"}
    principal = _auth(accounts, "POST", headers=bearer)
    assert principal.method is AuthMethod.PERSONAL_KEY and principal.role is Role.VIEWER
    assert principal.key_id == info.id and principal.email == "ada@example.com"
    assert accounts.keys[info.id].last_used_ms == NOW
    assert _error(lambda: require(principal, Action.EDIT)).status == 403
    require(principal, Action.VIEW)
    _run(accounts.revoke_key(1, info.id, NOW))
    assert _error(lambda: _auth(accounts, headers=bearer)).status == 401
    assert (
        _error(lambda: _auth(accounts, headers={"authorization": "Bearer phx_nope"})).status == 401
    )


def test_keys_without_a_user_act_as_admins_of_their_project_only() -> None:
    accounts, _ = _setup(Role.VIEWER)
    _, secret = _run(accounts.create_user_key(1, None, "bootstrap", 0))
    bearer = {"authorization": f"Bearer {secret}"}
    assert _auth(accounts, headers=bearer, project="1").role is Role.ADMIN
    assert _error(lambda: _auth(accounts, headers=bearer, project="2")).status == 404
    assert _error(lambda: _auth(accounts, headers=bearer, project="x")).status == 404


def test_a_key_whose_user_lost_access_is_refused() -> None:
    accounts, user_id = _setup(Role.EDITOR)
    _, secret = _run(accounts.create_user_key(1, user_id, "ci", 0))
    _run(accounts.change_membership(user_id, 1, None, 0))
    assert (
        _error(lambda: _auth(accounts, headers={"authorization": f"Bearer {secret}"})).status == 401
    )


def _session(accounts: MemoryAccounts, user_id: int) -> str:
    new = sessions.start_session(NOW)
    _run(accounts.create_session(user_id, new.token_hash, NOW, new.expires_at_ms, "", ""))
    return new.token


def test_sessions_need_the_csrf_token_and_same_origin_to_change_things() -> None:
    accounts, user_id = _setup(Role.EDITOR)
    token = _session(accounts, user_id)
    jar = {"flagstaff_session": token}
    assert _auth(accounts, "GET", cookies=jar).method is AuthMethod.SESSION
    assert _error(lambda: _auth(accounts, "PATCH", cookies=jar)).status == 403
    good = {csrf.CSRF_HEADER: csrf.csrf_token_for(token), "origin": f"https://{HOST}"}
    principal = _auth(accounts, "PATCH", cookies=jar, headers=good)
    assert principal.role is Role.EDITOR and principal.user_id == user_id
    cross = {**good, "origin": "https://evil.example"}
    assert (
        _error(lambda: _auth(accounts, "PATCH", cookies=jar, headers=cross)).code == "csrf_failed"
    )
    assert _error(lambda: _auth(accounts, "GET", cookies=jar, project="2")).status == 404
    assert _error(lambda: _auth(accounts, cookies={"flagstaff_session": "nope"})).status == 401
    assert _error(lambda: _auth(accounts)).code == "not_authenticated"


def test_a_bearer_key_wins_over_a_cookie() -> None:
    accounts, user_id = _setup(Role.EDITOR)
    token = _session(accounts, user_id)
    _, secret = _run(accounts.create_user_key(1, None, "k", 0))
    principal = _auth(
        accounts,
        "POST",
        headers={"authorization": f"Bearer {secret}"},
        cookies={"flagstaff_session": token},
    )
    assert principal.method is AuthMethod.PERSONAL_KEY
