"""A console over in-memory accounts and flags, plus a management API stand-in that checks
the session's CSRF token and validates bodies with the real flag rules: what the editor's
script sends is checked in a real browser before the console is wired to storage.

The stand-in authenticates like the wired API will (``http/principal.py``). Served by granian:
``granian --interface asgi tests.e2e.console_app:app``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from argon2 import PasswordHasher
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flagstaff.accounts import api_keys
from flagstaff.accounts.records import Role
from flagstaff.accounts.roles import Action, Principal, can_revoke_key
from flagstaff.activity.diff import record_change
from flagstaff.activity.records import Activity, Actor, Scope, StoredActivity
from flagstaff.activity.rollback import FlagVersion, RollbackError, plan_rollback
from flagstaff.console.routes import console_routes
from flagstaff.http import admin_models
from flagstaff.http.errors import ApiError
from flagstaff.http.principal import authenticate, require
from tests.unit.console_fakes import MemoryAccounts, MemoryData

EDITOR_EMAIL = "editor@example.com"
VIEWER_EMAIL = "viewer@example.com"
PASSWORD = "correct horse battery"

accounts = MemoryAccounts()
data = MemoryData(
    [
        {
            "id": 1,
            "key": "dark-mode",
            "name": "Dark mode",
            "active": True,
            "deleted": False,
            "filters": {"groups": [{"properties": [], "rollout_percentage": 100}]},
            "tags": [],
            "version": 1,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    ]
)
sent: list[dict[str, Any]] = []  # every body the API accepted, for the test to read


async def _seed() -> None:
    fast = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    for email, role in ((EDITOR_EMAIL, Role.EDITOR), (VIEWER_EMAIL, Role.VIEWER)):
        user = await accounts.create_user(email, fast.hash(PASSWORD), 0)
        await accounts.set_membership(user.id, 1, role, 0)


asyncio.run(_seed())


def _json(value: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status, media_type="application/json")


async def _caller(request: Request, action: Action) -> Principal:
    principal = await authenticate(
        accounts,
        request.method,
        request.headers,
        request.cookies,
        request.url.netloc,
        request.path_params.get("pid"),
        int(time.time() * 1000),
    )
    require(principal, action)
    return principal


async def _checked(request: Request) -> Any:
    await _caller(request, Action.EDIT)
    return msgspec.json.decode(await request.body())


async def list_flags(request: Request) -> Response:
    await _caller(request, Action.VIEW)
    return _json({"results": [f for f in data.flags if not f.get("deleted")]})


async def create_key(request: Request) -> Response:
    principal = await _caller(request, Action.VIEW)
    label = msgspec.json.decode(await request.body()).get("label", "")
    info, secret = await accounts.create_user_key(
        principal.project_id, principal.user_id, label, int(time.time() * 1000)
    )
    return _json({**api_keys.key_json(info, str), "value": secret}, 201)


async def revoke_key(request: Request) -> Response:
    principal = await _caller(request, Action.VIEW)
    key_id = int(request.path_params["key_id"])
    owner = next((k.user_id for k in accounts.keys.values() if k.id == key_id), None)
    problem = can_revoke_key(principal, owner)
    if problem is not None:
        raise ApiError(403, "permission_denied", problem)
    await accounts.revoke_key(principal.project_id, key_id, int(time.time() * 1000))
    return Response(status_code=204)


def _record(
    before: dict[str, Any] | None, after: dict[str, Any], activity: Activity | None = None
) -> None:
    """What the store pass will do in the change's transaction: activity and version rows."""
    record = record_change(
        project_id=1,
        scope=Scope.FEATURE_FLAG,
        item_id=after["id"],
        actor=Actor(user_id=1, email=EDITOR_EMAIL),
        before=before,
        after=after,
        now_ms=int(time.time() * 1000),
        activity=activity,
    )
    if record is None:
        return
    stored = StoredActivity(len(data.activity) + 1, f"activity-{len(data.activity) + 1}", record)
    data.activity.append(stored)
    data.versions.setdefault(after["id"], []).append(
        FlagVersion(after["version"], after, record.created_at_ms, 1, stored.id)
    )


async def create_flag(request: Request) -> Response:
    flag = admin_models.flag_from_input(await _checked(request))
    flag.update(id=max(f["id"] for f in data.flags) + 1, version=1)
    data.flags.append(flag)
    sent.append(flag)
    _record(None, flag)
    return _json(flag, 201)


async def rollback_flag(request: Request) -> Response:
    current = await data.get_flag(1, int(request.path_params["flag_id"]))
    if current is None:
        raise ApiError(404, "not_found", "no such feature flag")
    body = await _checked(request)
    try:
        plan = plan_rollback(
            current["id"], data.versions.get(current["id"], []), current, body.get("version")
        )
    except RollbackError as exc:
        raise ApiError(400, "invalid_input", str(exc), exc.field) from None
    flag = admin_models.flag_from_input(plan.body, current)
    flag.update(id=current["id"], version=current["version"] + 1)
    data.flags[data.flags.index(current)] = flag
    _record(current, flag, Activity.ROLLED_BACK)
    return _json(flag)


async def update_flag(request: Request) -> Response:
    current = await data.get_flag(1, int(request.path_params["flag_id"]))
    if current is None:
        raise ApiError(404, "not_found", "no such feature flag")
    body = await _checked(request)
    flag = admin_models.flag_from_input(body, current)
    flag.update(id=current["id"], version=current["version"] + 1)
    data.flags[data.flags.index(current)] = flag
    sent.append(body)
    _record(current, flag)
    return _json(flag)


async def get_flag_json(request: Request) -> Response:
    return _json(await data.get_flag(1, int(request.path_params["flag_id"])))


async def last_sent(request: Request) -> Response:
    return _json(sent[-1] if sent else None)


async def on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return Response(exc.body(), exc.status, media_type="application/json")


app = Starlette(
    routes=[
        *console_routes(accounts, data),
        Route("/api/projects/{pid}/feature_flags/", create_flag, methods=["POST"]),
        Route("/api/projects/{pid}/feature_flags/", list_flags, methods=["GET"]),
        Route("/api/personal_api_keys/", create_key, methods=["POST"]),
        Route("/api/personal_api_keys/{key_id}/", revoke_key, methods=["DELETE"]),
        Route("/api/projects/{pid}/feature_flags/{flag_id}/", update_flag, methods=["PATCH"]),
        Route(
            "/api/projects/{pid}/feature_flags/{flag_id}/rollback/",
            rollback_flag,
            methods=["POST"],
        ),
        Route("/_test/last_sent", last_sent),
        Route("/_test/flag/{flag_id}", get_flag_json),
    ],
    exception_handlers={ApiError: on_api_error},
)
