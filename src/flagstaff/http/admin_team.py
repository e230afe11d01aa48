"""The management API's team routes: project members and roles, renaming the project, and
groups listed by key.

``/members/`` is Flagstaff's own (PostHog keeps members per organization and adds them by
invitation; here roles are per project and an admin adds a member directly): list, add an
existing user or create one with an initial password, change a role, remove a member. The
project always keeps an admin (the store checks it in the change's transaction). ``/groups/``
is PostHog's listing of one group type's groups, searched by key.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request

from flagstaff.accounts import passwords
from flagstaff.accounts.records import Membership, Role, User
from flagstaff.accounts.roles import Action, parse_role
from flagstaff.accounts.users import email_problem, normalize_email
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, invalid_input
from flagstaff.application.people import group_json
from flagstaff.common import clock
from flagstaff.common.clock import ms_to_iso
from flagstaff.experiments.model import ExperimentInvalid, parse_stats_defaults
from flagstaff.http.admin_context import Handler, project_json
from flagstaff.http.rest import MAX_ID, group_type_index_param, int_param, json_body
from flagstaff.store.base import Conflict, Project, Store
from flagstaff.store.retention import retention_problem

MAX_PROJECT_NAME = 200
ROLES = ", ".join(r.value for r in Role)


def _iso(ms: int | None) -> str | None:
    return ms_to_iso(ms) if ms is not None else None


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_input", "the request body must be a JSON object")
    return body


def _role(body: dict[str, Any]) -> Role:
    role = parse_role(body.get("role"))
    if role is None:
        raise ApiError(400, "invalid_input", f"role must be one of {ROLES}", "role")
    return role


def _user_id(request: Request) -> int:
    raw = request.path_params.get("user_id", "")
    if not raw.isdigit() or not 0 < int(raw) <= MAX_ID:
        raise ApiError(404, "not_found", "no such member")
    return int(raw)


def member_json(user: User, membership: Membership) -> dict[str, Any]:
    return {
        "id": user.id,
        "user": {"id": user.id, "email": user.email, "first_name": user.first_name},
        "role": membership.role.value,
        "joined_at": _iso(membership.created_at_ms),
        "last_login": _iso(user.last_login_ms),
        "single_sign_on": user.oidc_issuer is not None,
    }


# members ----------------------------------------------------------------------------------


async def list_members(ctx: Caller[Store], request: Request) -> Any:
    members = await ctx.accounts.list_members(ctx.project_id)
    results = [member_json(u, m) for u, m in members]
    return {"count": len(results), "next": None, "previous": None, "results": results}


async def _member(ctx: Caller[Store], user_id: int) -> tuple[User, Membership]:
    user = await ctx.accounts.get_user(user_id)
    membership = await ctx.accounts.get_membership(user_id, ctx.project_id)
    if user is None or membership is None:
        raise ApiError(404, "not_found", "no such member")
    return user, membership


async def add_member(ctx: Caller[Store], request: Request) -> Any:
    """Add the user with ``email`` (created with ``password`` when there is none; an existing
    user's password is never changed) with ``role``."""
    body = _object(await json_body(request))
    raw_email = body.get("email")
    email = normalize_email(raw_email) if isinstance(raw_email, str) else ""
    problem = email_problem(email)
    if problem is not None:
        raise ApiError(400, "invalid_input", problem, "email")
    role = _role(body)
    user = await ctx.accounts.find_user_by_email(email)
    created = False
    if user is None:
        password = body.get("password")
        if not isinstance(password, str) or not password:
            raise ApiError(400, "required", "a new user needs an initial password", "password")
        weakness = passwords.password_problem(password)
        if weakness is not None:
            raise ApiError(400, "invalid_input", weakness, "password")
        hashed = await asyncio.to_thread(passwords.hash_password, password)
        try:
            user = await ctx.accounts.create_user(email, hashed, clock.now_ms())
            created = True
        except Conflict:  # created meanwhile
            user = await ctx.accounts.find_user_by_email(email)
            if user is None:
                raise
    elif await ctx.accounts.get_membership(user.id, ctx.project_id) is not None:
        raise ApiError(
            400, "unique", "this user is a member already; change their role instead", "email"
        )
    membership = await ctx.accounts.change_membership(
        user.id, ctx.project_id, role, clock.now_ms(), ctx.source
    )
    assert membership is not None
    return 201, {**member_json(user, membership), "created_user": created}


async def update_member(ctx: Caller[Store], request: Request) -> Any:
    user, _ = await _member(ctx, _user_id(request))
    role = _role(_object(await json_body(request)))
    membership = await ctx.accounts.change_membership(
        user.id, ctx.project_id, role, clock.now_ms(), ctx.source
    )
    if membership is None:
        raise ApiError(404, "not_found", "no such member")
    return member_json(user, membership)


async def remove_member(ctx: Caller[Store], request: Request) -> Any:
    user, _ = await _member(ctx, _user_id(request))
    await ctx.accounts.change_membership(user.id, ctx.project_id, None, clock.now_ms(), ctx.source)
    return 204, None


async def end_member_sessions(ctx: Caller[Store], request: Request) -> Any:
    """Log the member out everywhere at once (every console session; keys are not touched)."""
    user, _ = await _member(ctx, _user_id(request))
    ended = await ctx.accounts.end_user_sessions(
        ctx.project_id, user.id, ctx.source, clock.now_ms()
    )
    return {"ended_sessions": ended}


# the project -------------------------------------------------------------------------------


async def update_project(ctx: Caller[Store], request: Request) -> Any:
    """Rename the project and/or set its ``event_retention_days`` (null: keep forever)."""
    body = _object(await json_body(request))
    if not {"name", "event_retention_days", "experiment_stats_defaults"} & body.keys():
        raise ApiError(400, "required", "name is required", "name")
    if "experiment_stats_defaults" in body:
        raw = body["experiment_stats_defaults"]
        try:
            defaults = parse_stats_defaults({} if raw is None else raw)
        except ExperimentInvalid as error:
            raise invalid_input(error) from None
        if not await ctx.store.set_experiment_stats_defaults(ctx.project_id, defaults):
            raise ApiError(404, "not_found", "no such project")
    name = body.get("name")
    if "name" in body:
        if not isinstance(name, str) or not name.strip():
            raise ApiError(400, "required", "name is required", "name")
        if len(name.strip()) > MAX_PROJECT_NAME:
            raise ApiError(
                400, "invalid_input", f"name has at most {MAX_PROJECT_NAME} characters", "name"
            )
    if "event_retention_days" in body:
        days = body["event_retention_days"]
        problem = retention_problem(days)
        if problem is not None:
            raise ApiError(400, "invalid_input", problem, "event_retention_days")
        if not await ctx.store.set_event_retention(ctx.project_id, days):
            raise ApiError(404, "not_found", "no such project")
    if isinstance(name, str):
        project = await ctx.store.rename_project(ctx.project_id, name.strip())
    else:
        project = await ctx.store.get_project(ctx.project_id)
    if project is None:
        raise ApiError(404, "not_found", "no such project")
    return await project_settings_json(ctx, project)


async def project_settings_json(ctx: Caller[Store], project: Project) -> dict[str, Any]:
    """A project with its settings (event retention, experiments' stats defaults)."""
    out = project_json(project)
    out["event_retention_days"] = await ctx.store.get_event_retention(ctx.project_id)
    out["experiment_stats_defaults"] = await ctx.store.get_experiment_stats_defaults(ctx.project_id)
    return out


# groups ------------------------------------------------------------------------------------


async def list_groups(ctx: Caller[Store], request: Request) -> Any:
    """One group type's groups by key; ``search`` keeps keys containing it (any case)."""
    index = group_type_index_param(request)
    search = request.query_params.get("search", "")
    if len(search) > 400:
        raise ApiError(400, "invalid_input", "search has at most 400 characters", "search")
    limit = int_param(request, "limit", 100, 1000) or 100
    offset = int_param(request, "offset", 0)
    groups = await ctx.store.list_groups(ctx.project_id, index, search, limit + 1, offset)
    next_url = None
    if len(groups) > limit:
        groups = groups[:limit]
        query = dict(request.query_params)
        query.update(limit=str(limit), offset=str(offset + limit))
        next_url = str(request.url.replace(query=urlencode(query)))
    previous_url = None
    if offset > 0:
        query = dict(request.query_params)
        query.update(limit=str(limit), offset=str(max(offset - limit, 0)))
        previous_url = str(request.url.replace(query=urlencode(query)))
    return {
        "next": next_url,
        "previous": previous_url,
        "results": [group_json(g) for g in groups],
    }


ROUTES: list[tuple[str, str, Handler, str]] = [
    ("PATCH", "/", update_project, "Rename the project, set its event retention"),
    ("GET", "/members/", list_members, "List the project's members and their roles"),
    (
        "POST",
        "/members/",
        add_member,
        "Add a member (an existing user, or a new one with an initial password)",
    ),
    ("PATCH", "/members/{user_id}/", update_member, "Change a member's role"),
    (
        "DELETE",
        "/members/{user_id}/",
        remove_member,
        "Remove a member (the project keeps at least one admin)",
    ),
    (
        "POST",
        "/members/{user_id}/end_sessions/",
        end_member_sessions,
        "End all of a member's console sessions at once",
    ),
    ("GET", "/groups/", list_groups, "List a group type's groups, searched by key"),
]
"""Paths below ``/api/projects/{project_id}``: the management API's ``ROUTES`` adds them."""

ROUTE_ACTIONS: dict[Handler, Action] = {
    update_project: Action.MANAGE,
    add_member: Action.MANAGE,
    update_member: Action.MANAGE,
    remove_member: Action.MANAGE,
    end_member_sessions: Action.MANAGE,
}
"""Members and the project's settings are the admins' (reading the members is anyone's)."""
