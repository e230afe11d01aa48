"""The management API's team routes: project members and roles, renaming the project, and
groups listed by key.

``/members/`` is Flagstaff's own (PostHog keeps members per organization and adds them by
invitation; here roles are per project and an admin adds a member directly): list, add an
existing user or create one with an initial password, change a role, remove a member, end
their sessions. What they do (and the project keeps an admin): ``application/accounts.py``.
``/groups/`` is PostHog's listing of one group type's groups, searched by key.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request

from flagstaff.accounts.roles import Action
from flagstaff.application import accounts, people
from flagstaff.application.accounts import (
    MemberInput,
    MemberRoleInput,
    ProjectUpdate,
    added_member_json,
    member_json,
    project_settings_json,
)
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import decode
from flagstaff.application.people import group_json
from flagstaff.http.admin_context import Handler
from flagstaff.http.rest import MAX_ID, group_type_index_param, int_param, json_body
from flagstaff.store.base import Store


def _user_id(request: Request) -> int:
    raw = request.path_params.get("user_id", "")
    if not raw.isdigit() or not 0 < int(raw) <= MAX_ID:
        raise ApiError(404, "not_found", "no such member")
    return int(raw)


# members ----------------------------------------------------------------------------------


async def list_members(ctx: Caller[Store], request: Request) -> Any:
    results = [member_json(m) for m in await accounts.list_members(ctx)]
    return {"count": len(results), "next": None, "previous": None, "results": results}


async def add_member(ctx: Caller[Store], request: Request) -> Any:
    """Add the user with ``email`` (created with ``password`` when there is none; an existing
    user's password is never changed) with ``role``."""
    body = decode(MemberInput, await json_body(request))
    return 201, added_member_json(await accounts.add_member(ctx, body))


async def update_member(ctx: Caller[Store], request: Request) -> Any:
    user_id = _user_id(request)
    body = decode(MemberRoleInput, await json_body(request))
    return member_json(await accounts.change_role(ctx, user_id, body))


async def remove_member(ctx: Caller[Store], request: Request) -> Any:
    await accounts.remove_member(ctx, _user_id(request))
    return 204, None


async def end_member_sessions(ctx: Caller[Store], request: Request) -> Any:
    """Log the member out everywhere at once (every console session; keys are not touched)."""
    return {"ended_sessions": await accounts.end_sessions(ctx, _user_id(request))}


# the project -------------------------------------------------------------------------------


async def update_project(ctx: Caller[Store], request: Request) -> Any:
    """Rename the project, set its ``event_retention_days`` (null: keep forever) and its
    experiments' stats defaults."""
    body = decode(ProjectUpdate, await json_body(request))
    return project_settings_json(await accounts.update_project(ctx, body))


# groups ------------------------------------------------------------------------------------


async def list_groups(ctx: Caller[Store], request: Request) -> Any:
    """One group type's groups by key; ``search`` keeps keys containing it (any case)."""
    index = group_type_index_param(request)
    search = request.query_params.get("search", "")
    limit = int_param(request, "limit", 100, 1000) or 100
    offset = int_param(request, "offset", 0)
    page = await people.list_groups(ctx, index, search, limit, offset)
    next_url = None
    if page.more:
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
        "results": [group_json(g) for g in page.groups],
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
