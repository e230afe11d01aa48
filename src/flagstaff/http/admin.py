"""The management API under /api/, in PostHog's REST shapes, authorised by personal API keys.

Routes are declared once in :data:`ROUTES`; the starlette routes and the OpenAPI document at
/api/schema/ (``http/openapi.py``, which the app adds as an extra route) are both built from
that table, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flagstaff import logs
from flagstaff.http import admin_models
from flagstaff.http import surveys as survey_routes
from flagstaff.http.errors import ApiError
from flagstaff.http.rest import MAX_ID
from flagstaff.http.rest import int_param as _int_param
from flagstaff.http.rest import json_body as _body
from flagstaff.http.rest import paginated as _paginated
from flagstaff.ingest.groups import MAX_GROUP_TYPES
from flagstaff.store.base import Conflict, NotFound, PersonalKey, Store, StoredEvent

Handler = Callable[["AdminContext", Request], Awaitable[Any]]


class AdminContext(msgspec.Struct):
    store: Store
    project_id: int
    key: PersonalKey


def _json(data: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(data), status, media_type="application/json")


def _path_int(request: Request, name: str) -> int:
    raw = request.path_params.get(name, "")
    if not raw.isdigit() or not 0 < int(raw) <= MAX_ID:
        raise ApiError(404, "not_found", f"no such {name.replace('_', ' ')}")
    return int(raw)


def _ms_to_iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _parse_time(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(400, "invalid_input", f"{name} must be an ISO 8601 time", name) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


# projects ---------------------------------------------------------------------------------


def _project_json(project: Any) -> dict[str, Any]:
    return {
        "id": project.id,
        "uuid": project.uuid,
        "name": project.name,
        "api_token": project.api_token,
        "created_at": project.created_at,
    }


async def list_projects(ctx: AdminContext, request: Request) -> Any:
    project = await ctx.store.get_project(ctx.project_id)
    results = [_project_json(project)] if project else []
    return {"count": len(results), "next": None, "previous": None, "results": results}


async def create_project(ctx: AdminContext, request: Request) -> Any:
    body = await _body(request)
    name = body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not name.strip():
        raise ApiError(400, "required", "name is required", "name")
    project = await ctx.store.create_project(name.strip())
    _, secret = await ctx.store.create_personal_key(project.id, f"{name.strip()} key")
    return 201, {**_project_json(project), "personal_api_key": secret}


async def get_project(ctx: AdminContext, request: Request) -> Any:
    project = await ctx.store.get_project(ctx.project_id)
    if project is None:
        raise ApiError(404, "not_found", "no such project")
    return _project_json(project)


# feature flags ----------------------------------------------------------------------------


async def list_flags(ctx: AdminContext, request: Request) -> Any:
    limit = _int_param(request, "limit", 100, 1000)
    offset = _int_param(request, "offset", 0)
    page = await ctx.store.list_flags(ctx.project_id, limit, offset)
    return _paginated(request, page.count, page.results, limit, offset)


async def create_flag(ctx: AdminContext, request: Request) -> Any:
    flag = admin_models.flag_from_input(await _body(request))
    return 201, await ctx.store.create_flag(ctx.project_id, flag)


async def _existing_flag(ctx: AdminContext, request: Request) -> dict[str, Any]:
    flag = await ctx.store.get_flag(ctx.project_id, _path_int(request, "flag_id"))
    if flag is None:
        raise ApiError(404, "not_found", "no such feature flag")
    return flag


async def get_flag(ctx: AdminContext, request: Request) -> Any:
    return await _existing_flag(ctx, request)


async def update_flag(ctx: AdminContext, request: Request) -> Any:
    current = await _existing_flag(ctx, request)
    flag = admin_models.flag_from_input(await _body(request), current)
    return await ctx.store.update_flag(ctx.project_id, current["id"], flag)


async def replace_flag(ctx: AdminContext, request: Request) -> Any:
    """PUT, a full update as in PostHog's API: fields left out take their defaults."""
    current = await _existing_flag(ctx, request)
    flag = admin_models.flag_from_input(await _body(request))
    flag = {**current, **flag, "version": current.get("version")}
    return await ctx.store.update_flag(ctx.project_id, current["id"], flag)


async def delete_flag(ctx: AdminContext, request: Request) -> Any:
    current = await _existing_flag(ctx, request)
    if not current["deleted"]:
        await ctx.store.update_flag(ctx.project_id, current["id"], {**current, "deleted": True})
    return 204, None


# cohorts ----------------------------------------------------------------------------------


async def list_cohorts(ctx: AdminContext, request: Request) -> Any:
    limit = _int_param(request, "limit", 100, 1000)
    offset = _int_param(request, "offset", 0)
    page = await ctx.store.list_cohorts(ctx.project_id, limit, offset)
    return _paginated(request, page.count, page.results, limit, offset)


async def create_cohort(ctx: AdminContext, request: Request) -> Any:
    cohort = admin_models.cohort_from_input(await _body(request))
    return 201, await ctx.store.create_cohort(ctx.project_id, cohort)


async def _existing_cohort(ctx: AdminContext, request: Request) -> dict[str, Any]:
    cohort = await ctx.store.get_cohort(ctx.project_id, _path_int(request, "cohort_id"))
    if cohort is None:
        raise ApiError(404, "not_found", "no such cohort")
    return cohort


async def get_cohort(ctx: AdminContext, request: Request) -> Any:
    return await _existing_cohort(ctx, request)


async def update_cohort(ctx: AdminContext, request: Request) -> Any:
    current = await _existing_cohort(ctx, request)
    cohort = admin_models.cohort_from_input(await _body(request), current)
    return await ctx.store.update_cohort(ctx.project_id, current["id"], cohort)


async def delete_cohort(ctx: AdminContext, request: Request) -> Any:
    current = await _existing_cohort(ctx, request)
    await ctx.store.update_cohort(ctx.project_id, current["id"], {**current, "deleted": True})
    return 204, None


async def list_cohort_members(ctx: AdminContext, request: Request) -> Any:
    cohort = await _existing_cohort(ctx, request)
    ids = await ctx.store.list_static_members(ctx.project_id, cohort["id"])
    return {"count": len(ids), "next": None, "previous": None, "results": ids}


async def add_cohort_members(ctx: AdminContext, request: Request) -> Any:
    cohort = await _existing_cohort(ctx, request)
    ids = admin_models.distinct_ids_from(await _body(request))
    return await ctx.store.change_static_members(ctx.project_id, cohort["id"], ids, [])


async def remove_cohort_members(ctx: AdminContext, request: Request) -> Any:
    cohort = await _existing_cohort(ctx, request)
    ids = admin_models.distinct_ids_from(await _body(request))
    return await ctx.store.change_static_members(ctx.project_id, cohort["id"], [], ids)


# read views -------------------------------------------------------------------------------


async def find_person(ctx: AdminContext, request: Request) -> Any:
    distinct_id = request.query_params.get("distinct_id")
    if not distinct_id:
        raise ApiError(400, "required", "distinct_id is required", "distinct_id")
    person = await ctx.store.get_person(ctx.project_id, distinct_id)
    results = []
    if person is not None:
        results.append(
            {
                "id": person.uuid,
                "uuid": person.uuid,
                "distinct_ids": person.distinct_ids,
                "properties": person.properties,
                "is_identified": person.is_identified,
                "created_at": _ms_to_iso(person.created_at_ms),
            }
        )
    return {"count": len(results), "next": None, "previous": None, "results": results}


async def find_group(ctx: AdminContext, request: Request) -> Any:
    index = _int_param(request, "group_type_index", -1)
    key = request.query_params.get("group_key")
    if index < 0 or index > 4:
        raise ApiError(400, "invalid_input", "group_type_index must be 0-4", "group_type_index")
    if not key:
        raise ApiError(400, "required", "group_key is required", "group_key")
    group = await ctx.store.get_group(ctx.project_id, index, key)
    if group is None:
        raise ApiError(404, "not_found", "no such group")
    return {
        "group_type_index": group.group_type_index,
        "group_type": group.group_type,
        "group_key": group.group_key,
        "group_properties": group.properties,
        "created_at": _ms_to_iso(group.created_at_ms),
    }


def _group_type_json(index: int, name: str) -> dict[str, Any]:
    """PostHog's group type shape; the display metadata it also holds is not kept here."""
    return {
        "group_type": name,
        "group_type_index": index,
        "name_singular": None,
        "name_plural": None,
        "detail_dashboard": None,
        "default_columns": None,
        "created_at": None,
    }


async def list_group_types(ctx: AdminContext, request: Request) -> Any:
    types = await ctx.store.list_group_types(ctx.project_id)
    return [_group_type_json(i, name) for i, name in sorted(types.items())]


async def create_group_type(ctx: AdminContext, request: Request) -> Any:
    """Map a group type name to an index (the next free one unless given); 200 when so already."""
    name, index = admin_models.group_type_from_input(await _body(request))
    types = await ctx.store.list_group_types(ctx.project_id)
    if index is None:
        index = next((i for i, n in types.items() if n == name), None)
    if index is None:
        index = next((i for i in range(MAX_GROUP_TYPES) if i not in types), MAX_GROUP_TYPES)
        if index == MAX_GROUP_TYPES:
            raise ApiError(
                400, "invalid_input", f"a project has at most {MAX_GROUP_TYPES} group types"
            )
    created = await ctx.store.create_group_type(ctx.project_id, index, name)
    return (201 if created else 200), _group_type_json(index, name)


def event_json(e: StoredEvent) -> dict[str, Any]:
    return {
        "id": e.uuid,
        "uuid": e.uuid,
        "event": e.event,
        "distinct_id": e.distinct_id,
        "properties": e.properties,
        "timestamp": _ms_to_iso(e.timestamp_ms),
        "received_at": _ms_to_iso(e.received_ms),
        "historical": e.historical,
        "person": {"uuid": e.person_uuid} if e.person_uuid else None,
    }


async def list_events(ctx: AdminContext, request: Request) -> Any:
    limit = _int_param(request, "limit", 100, 1000) or 100
    cursor: tuple[int, int] | None = None
    raw_cursor = request.query_params.get("cursor")
    if raw_cursor:
        try:
            ts, seq = raw_cursor.split("_", 1)
            cursor = (int(ts), int(seq))
            if not all(abs(part) <= MAX_ID for part in cursor):
                raise ValueError(raw_cursor)
        except ValueError:
            raise ApiError(
                400, "invalid_input", "cursor is not one this API gave", "cursor"
            ) from None
    rows = await ctx.store.list_events(
        ctx.project_id,
        distinct_id=request.query_params.get("distinct_id") or None,
        event=request.query_params.get("event") or None,
        after_ms=_parse_time(request, "after"),
        before_ms=_parse_time(request, "before"),
        cursor=cursor,
        limit=limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    next_url = None
    if more:
        last = rows[-1]
        query = dict(request.query_params)
        query["cursor"] = f"{last.timestamp_ms}_{last.seq}"
        next_url = str(request.url.replace(query=urlencode(query)))
    return {"next": next_url, "results": [event_json(e) for e in rows]}


async def list_warnings(ctx: AdminContext, request: Request) -> Any:
    limit = _int_param(request, "limit", 100, 1000)
    offset = _int_param(request, "offset", 0)
    page = await ctx.store.list_warnings(ctx.project_id, limit, offset)
    results = [
        {
            "id": w.id,
            "type": w.type,
            "details": w.details,
            "timestamp": _ms_to_iso(w.created_at_ms),
        }
        for w in page.results
    ]
    return _paginated(request, page.count, results, limit, offset)


# the route table ---------------------------------------------------------------------------

P = "/api/projects/{project_id}"
ROUTES: list[tuple[str, str, Handler, str]] = [
    ("GET", "/api/projects/", list_projects, "List the projects the key can use"),
    ("POST", "/api/projects/", create_project, "Create a project (returns its token and a key)"),
    ("GET", P + "/", get_project, "Get a project"),
    ("GET", P + "/feature_flags/", list_flags, "List feature flags"),
    ("POST", P + "/feature_flags/", create_flag, "Create a feature flag"),
    ("GET", P + "/feature_flags/{flag_id}/", get_flag, "Get a feature flag"),
    ("PATCH", P + "/feature_flags/{flag_id}/", update_flag, "Update a feature flag"),
    ("PUT", P + "/feature_flags/{flag_id}/", replace_flag, "Replace a feature flag (full update)"),
    ("DELETE", P + "/feature_flags/{flag_id}/", delete_flag, "Soft-delete a feature flag"),
    ("GET", P + "/cohorts/", list_cohorts, "List cohorts"),
    ("POST", P + "/cohorts/", create_cohort, "Create a dynamic or static cohort"),
    ("GET", P + "/cohorts/{cohort_id}/", get_cohort, "Get a cohort"),
    ("PATCH", P + "/cohorts/{cohort_id}/", update_cohort, "Update a cohort"),
    ("DELETE", P + "/cohorts/{cohort_id}/", delete_cohort, "Soft-delete a cohort"),
    ("GET", P + "/cohorts/{cohort_id}/persons/", list_cohort_members, "Static cohort members"),
    (
        "PATCH",
        P + "/cohorts/{cohort_id}/add_persons_to_static_cohort/",
        add_cohort_members,
        "Add distinct ids to a static cohort",
    ),
    (
        "PATCH",
        P + "/cohorts/{cohort_id}/remove_person_from_static_cohort/",
        remove_cohort_members,
        "Remove distinct ids from a static cohort",
    ),
    ("GET", P + "/persons/", find_person, "Find the person behind a distinct id"),
    ("GET", P + "/groups/find", find_group, "Find a group by type index and key"),
    ("GET", P + "/groups_types/", list_group_types, "List group types"),
    (
        "POST",
        P + "/groups_types/",
        create_group_type,
        "Create a group type (200 when it exists already)",
    ),
    ("GET", P + "/events/", list_events, "List events, newest first, cursor paginated"),
    ("GET", P + "/ingestion_warnings/", list_warnings, "List ingestion warnings"),
    *survey_routes.ROUTES,
]

Authenticate = Callable[[Request], Awaitable[PersonalKey]]


def _endpoint(handler: Handler, store: Store, authenticate: Authenticate) -> Callable[..., Any]:
    async def endpoint(request: Request) -> Response:
        key = await authenticate(request)
        raw = request.path_params.get("project_id", "@current")
        if raw != "@current":
            try:
                requested = int(raw)
            except ValueError:
                raise ApiError(404, "not_found", "no such project") from None
            if requested != key.project_id:
                raise ApiError(404, "not_found", "no such project")
        ctx = AdminContext(store=store, project_id=key.project_id, key=key)
        try:
            result = await handler(ctx, request)
        except Conflict as exc:
            raise ApiError(
                400, "unique" if exc.field == "key" else "conflict", exc.message, exc.field
            ) from None
        except NotFound as exc:
            raise ApiError(404, "not_found", f"no such {exc}") from None
        status = 200
        if isinstance(result, tuple):
            status, result = result
        if status == 204:
            return Response(status_code=204)
        return _json(result, status)

    return endpoint


def build_routes(store: Store, authenticate: Authenticate) -> list[Route]:
    grouped: dict[str, dict[str, Handler]] = {}
    for method, path, handler, _ in ROUTES:
        grouped.setdefault(path, {})[method] = handler
    routes = []
    for path, handlers in grouped.items():
        endpoints = {m: _endpoint(h, store, authenticate) for m, h in handlers.items()}

        async def dispatch(request: Request, endpoints: dict[str, Any] = endpoints) -> Response:
            return await endpoints[request.method](request)

        routes.append(Route(path, dispatch, methods=list(handlers)))
    return routes


def build_admin(store: Store, authenticate: Authenticate, extra_routes: list[Route]) -> Starlette:
    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return Response(exc.body(), exc.status, media_type="application/json")

    async def on_http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        detail = getattr(exc, "detail", "error")
        code = {404: "not_found", 405: "method_not_allowed"}.get(status, "error")
        return Response(
            ApiError(status, code, str(detail)).body(), status, media_type="application/json"
        )

    async def on_unhandled(request: Request, exc: Exception) -> Response:
        logs.logger.exception("unhandled error on %s", request.url.path, exc_info=exc)
        body = ApiError(500, "server_error", "the server failed to answer").body()
        return Response(body, 500, media_type="application/json")

    from starlette.exceptions import HTTPException

    routes = [
        *build_routes(store, authenticate),
        *extra_routes,
    ]
    return Starlette(
        routes=routes,
        exception_handlers={
            ApiError: on_api_error,
            HTTPException: on_http_error,
            Exception: on_unhandled,
        },
    )
