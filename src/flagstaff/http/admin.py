"""The management API under /api/, in PostHog's REST shapes, authorised by a personal API key
or a console session (cookie plus CSRF token), with one role check per request.

Routes are declared once in :data:`ROUTES`; the starlette routes and the OpenAPI document at
/api/schema/ (``http/openapi.py``, which the app adds as an extra route) are both built from
that table, so they cannot drift apart. A route's action is ``action_for_method`` (reads view,
the rest edit) unless :data:`ROUTE_ACTIONS` names another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from flagstaff.accounts.roles import Action, action_for_method
from flagstaff.accounts.store import AccountStore
from flagstaff.activity.api import activity_page
from flagstaff.activity.records import (
    Scope,
)
from flagstaff.application import accounts as account_cases
from flagstaff.application import activity, cohorts, people
from flagstaff.application import flags as flag_rules
from flagstaff.application.approvals import Held, Unchanged
from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import decode
from flagstaff.common.clock import iso_to_ms
from flagstaff.common.clock import ms_to_iso as _ms_to_iso
from flagstaff.flags.records import flag_json
from flagstaff.http import (
    admin_approvals,
    admin_experiments,
    admin_team,
    admin_usage,
    admin_webhooks,
    cohort_csv,
)
from flagstaff.http import surveys as survey_routes
from flagstaff.http.admin_context import (
    Caller,
    Handler,
    existing_flag,
    project_json,
)
from flagstaff.http.auth import Authenticate
from flagstaff.http.principal import require
from flagstaff.http.rest import group_type_index_param
from flagstaff.http.rest import int_param as _int_param
from flagstaff.http.rest import json_body as _body
from flagstaff.http.rest import paginated as _paginated
from flagstaff.http.rest import path_int as _path_int
from flagstaff.http.unavailable import RETRY_AFTER, store_unavailable
from flagstaff.ops import logs
from flagstaff.store.base import Conflict, NotFound, Store
from flagstaff.store.records import Cohort, EventQuery


def _json(data: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(data), status, media_type="application/json")


def _parse_time(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if not raw:
        return None
    parsed = iso_to_ms(raw)
    if parsed is None:
        raise ApiError(400, "invalid_input", f"{name} must be an ISO 8601 time", name)
    return parsed


# projects ---------------------------------------------------------------------------------


_project_json = project_json


async def list_projects(ctx: Caller[Store], request: Request) -> Any:
    results = [_project_json(p) for p in await account_cases.list_projects(ctx)]
    return {"count": len(results), "next": None, "previous": None, "results": results}


async def create_project(ctx: Caller[Store], request: Request) -> Any:
    body = decode(account_cases.ProjectInput, await _body(request))
    created = await account_cases.create_project(ctx, body)
    return 201, account_cases.created_project_json(created)


async def get_project(ctx: Caller[Store], request: Request) -> Any:
    return account_cases.project_settings_json(await account_cases.project_settings(ctx))


# feature flags ----------------------------------------------------------------------------


async def list_flags(ctx: Caller[Store], request: Request) -> Any:
    limit = _int_param(request, "limit", 100, 1000)
    offset = _int_param(request, "offset", 0)
    page = await flag_rules.list_flags(ctx, limit, offset)
    flags = [flag_json(flag) for flag in page.results]
    return _paginated(request, page.count, flags, limit, offset)


def _written(outcome: flag_rules.FlagOutcome) -> Any:
    """A flag write's answer: the flag; 202 with the change request it became; under the
    approval policy, the flag as it was when nothing would change."""
    if isinstance(outcome, Held):
        return 202, outcome.request
    if isinstance(outcome, Unchanged):
        return flag_json(outcome.flag)
    return flag_json(outcome)


async def _flag_input(request: Request) -> flag_rules.FeatureFlagInput:
    return decode(flag_rules.FeatureFlagInput, await _body(request))


async def create_flag(ctx: Caller[Store], request: Request) -> Any:
    return 201, flag_json(await flag_rules.create_flag(ctx, await _flag_input(request)))


_existing_flag = existing_flag


async def get_flag(ctx: Caller[Store], request: Request) -> Any:
    return flag_json(await _existing_flag(ctx, request))


async def update_flag(ctx: Caller[Store], request: Request) -> Any:
    current = await _existing_flag(ctx, request)
    return _written(await flag_rules.update_flag(ctx, current, await _flag_input(request)))


async def replace_flag(ctx: Caller[Store], request: Request) -> Any:
    """PUT, a full update as in PostHog's API: fields left out take their defaults."""
    current = await _existing_flag(ctx, request)
    return _written(await flag_rules.replace_flag(ctx, current, await _flag_input(request)))


async def delete_flag(ctx: Caller[Store], request: Request) -> Any:
    current = await _existing_flag(ctx, request)
    outcome = await flag_rules.delete_flag(ctx, current)
    if isinstance(outcome, Held | Unchanged):
        return _written(outcome)
    return 204, None


async def rollback_flag(ctx: Caller[Store], request: Request) -> Any:
    """Restore an earlier version of the flag: an ordinary update (same validation, same
    optimistic version check) recorded as ``rolled_back``."""
    current = await _existing_flag(ctx, request)
    data = flag_rules.rollback_input(await _body(request))
    return _written(await flag_rules.rollback_flag(ctx, current, data))


async def flag_activity(ctx: Caller[Store], request: Request) -> Any:
    """PostHog's per-flag activity: ``limit`` (default 10) and ``page`` (from 1), newest first,
    with ``total_count``."""
    flag = await _existing_flag(ctx, request)
    limit = _int_param(request, "limit", 10, 100) or 10
    page = max(_int_param(request, "page", 1), 1)
    found = await activity.flag_activity(ctx, flag, limit, page)

    def page_url(number: int) -> str:
        query = dict(request.query_params)
        query.update(limit=str(limit), page=str(number))
        return str(request.url.replace(query=urlencode(query)))

    next_url = page_url(page + 1) if page * limit < found.total else None
    previous_url = page_url(page - 1) if page > 1 else None
    return activity_page(found.records, _ms_to_iso, next_url, previous_url, found.total)


def _scope_param(request: Request) -> Scope | None:
    raw = request.query_params.get("scope")
    if not raw:
        return None
    try:
        return Scope(raw)
    except ValueError:
        known = ", ".join(s.value for s in Scope)
        raise ApiError(400, "invalid_input", f"scope must be one of {known}", "scope") from None


async def activity_log(ctx: Caller[Store], request: Request) -> Any:
    """The project's activity log, newest first, cursor paginated (100 a page), filtered by
    ``scope``, ``item_id`` and ``user`` (a user id)."""
    limit = _int_param(request, "limit", 100, 100) or 100
    user = request.query_params.get("user")
    if user is not None and not user.isdigit():
        raise ApiError(400, "invalid_input", "user must be a user id", "user")
    log = await activity.activity_log(
        ctx,
        scope=_scope_param(request),
        item_id=request.query_params.get("item_id") or None,
        user_id=int(user) if user else None,
        before_id=_int_param(request, "cursor", 0) or None,
        limit=limit,
    )
    next_url = None
    if log.cursor is not None:
        query = dict(request.query_params)
        query["cursor"] = str(log.cursor)
        next_url = str(request.url.replace(query=urlencode(query)))
    return activity_page(log.records, _ms_to_iso, next_url, None)


# scheduled changes ------------------------------------------------------------------------


async def list_scheduled_changes(ctx: Caller[Store], request: Request) -> Any:
    raw = request.query_params.get("record_id")
    if raw is not None and not raw.isdigit():
        raise ApiError(400, "invalid_input", "record_id must be a feature flag id", "record_id")
    changes = await flag_rules.list_scheduled_changes(ctx, int(raw) if raw else None)
    results = [flag_rules.scheduled_json(c) for c in changes]
    return {"count": len(results), "next": None, "previous": None, "results": results}


async def create_scheduled_change(ctx: Caller[Store], request: Request) -> Any:
    data = flag_rules.scheduled_change_input(await _body(request))
    change = await flag_rules.create_scheduled_change(ctx, data)
    if isinstance(change, Held):
        return 202, change.request
    return 201, flag_rules.scheduled_json(change)


async def delete_scheduled_change(ctx: Caller[Store], request: Request) -> Any:
    await flag_rules.delete_scheduled_change(ctx, _path_int(request, "change_id"))
    return 204, None


# personal API keys ------------------------------------------------------------------------


async def list_keys(ctx: Caller[Store], request: Request) -> Any:
    """Admins see every key of the project, others their own."""
    return [account_cases.api_key_json(k) for k in await account_cases.list_keys(ctx)]


async def create_key(ctx: Caller[Store], request: Request) -> Any:
    """A new key for the caller; its value is in this answer only."""
    body = decode(account_cases.PersonalApiKeyInput, await _body(request))
    return 201, account_cases.created_key_json(await account_cases.create_key(ctx, body))


async def revoke_key(ctx: Caller[Store], request: Request) -> Any:
    await account_cases.revoke_key(ctx, _path_int(request, "key_id"))
    return 204, None


# cohorts ----------------------------------------------------------------------------------


async def list_cohorts(ctx: Caller[Store], request: Request) -> Any:
    limit = _int_param(request, "limit", 100, 1000)
    offset = _int_param(request, "offset", 0)
    page = await cohorts.list_cohorts(ctx, limit, offset)
    results = [cohorts.cohort_json(c) for c in page.results]
    return _paginated(request, page.count, results, limit, offset)


async def create_cohort(ctx: Caller[Store], request: Request) -> Any:
    """JSON, or a multipart form with a ``csv`` of distinct ids: a static cohort of them."""
    if cohort_csv.is_multipart(request):
        form = await cohort_csv.read_form(request)
        data = cohorts.csv_cohort_input(form.fields, form.distinct_ids)
    else:
        data = cohorts.cohort_input(await _body(request))
    return 201, cohorts.cohort_json(await cohorts.create_cohort(ctx, data))


async def _existing_cohort(ctx: Caller[Store], request: Request) -> Cohort:
    return await cohorts.existing_cohort(ctx, _path_int(request, "cohort_id"))


async def get_cohort(ctx: Caller[Store], request: Request) -> Any:
    return cohorts.cohort_json(await _existing_cohort(ctx, request))


async def update_cohort(ctx: Caller[Store], request: Request) -> Any:
    """JSON, or a multipart form whose ``csv`` adds its distinct ids to a static cohort."""
    current = await _existing_cohort(ctx, request)
    if not cohort_csv.is_multipart(request):
        data = cohorts.cohort_input(await _body(request))
        return cohorts.cohort_json(await cohorts.update_cohort(ctx, current, data))
    form = await cohort_csv.read_form(request)
    changed = await cohorts.upload_members(ctx, current, form.fields, form.distinct_ids)
    return cohorts.cohort_json(changed)


async def delete_cohort(ctx: Caller[Store], request: Request) -> Any:
    await cohorts.delete_cohort(ctx, await _existing_cohort(ctx, request))
    return 204, None


async def list_cohort_members(ctx: Caller[Store], request: Request) -> Any:
    ids = await cohorts.list_members(ctx, await _existing_cohort(ctx, request))
    return {"count": len(ids), "next": None, "previous": None, "results": ids}


async def add_cohort_members(ctx: Caller[Store], request: Request) -> Any:
    cohort = await _existing_cohort(ctx, request)
    ids = cohorts.distinct_ids_input(await _body(request))
    return cohorts.cohort_json(await cohorts.add_members(ctx, cohort, ids))


async def remove_cohort_members(ctx: Caller[Store], request: Request) -> Any:
    cohort = await _existing_cohort(ctx, request)
    ids = cohorts.distinct_ids_input(await _body(request))
    return cohorts.cohort_json(await cohorts.remove_members(ctx, cohort, ids))


# read views -------------------------------------------------------------------------------


async def find_person(ctx: Caller[Store], request: Request) -> Any:
    distinct_id = request.query_params.get("distinct_id")
    if not distinct_id:
        raise ApiError(400, "required", "distinct_id is required", "distinct_id")
    person = await people.find_person(ctx, distinct_id)
    results = [people.person_json(person)] if person is not None else []
    return {"count": len(results), "next": None, "previous": None, "results": results}


async def find_group(ctx: Caller[Store], request: Request) -> Any:
    index = group_type_index_param(request)
    key = request.query_params.get("group_key")
    if not key:
        raise ApiError(400, "required", "group_key is required", "group_key")
    return people.group_json(await people.find_group(ctx, index, key))


async def list_group_types(ctx: Caller[Store], request: Request) -> Any:
    return [people.group_type_json(t) for t in await people.list_group_types(ctx)]


async def create_group_type(ctx: Caller[Store], request: Request) -> Any:
    """Map a group type name to an index (the next free one unless given); 200 when so already."""
    data = people.group_type_input(await _body(request))
    mapped = await people.create_group_type(ctx, data)
    return (201 if mapped.created else 200), people.group_type_json(mapped.group_type)


async def list_events(ctx: Caller[Store], request: Request) -> Any:
    raw_cursor = request.query_params.get("cursor")
    query = EventQuery(
        distinct_id=request.query_params.get("distinct_id") or None,
        event=request.query_params.get("event") or None,
        after_ms=_parse_time(request, "after"),
        before_ms=_parse_time(request, "before"),
        cursor=people.parse_event_cursor(raw_cursor) if raw_cursor else None,
        limit=_int_param(request, "limit", 100, 1000) or 100,
    )
    page = await people.events_page(ctx, query)
    next_url = None
    if page.cursor is not None:
        params = dict(request.query_params)
        params["cursor"] = page.cursor
        next_url = str(request.url.replace(query=urlencode(params)))
    return {"next": next_url, "results": [people.event_json(e) for e in page.events]}


async def list_warnings(ctx: Caller[Store], request: Request) -> Any:
    limit = _int_param(request, "limit", 100, 1000)
    offset = _int_param(request, "offset", 0)
    page = await people.list_warnings(ctx, limit, offset)
    results = [people.warning_json(w) for w in page.warnings]
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
    (
        "POST",
        P + "/feature_flags/{flag_id}/rollback/",
        rollback_flag,
        "Restore an earlier version of a feature flag",
    ),
    ("GET", P + "/feature_flags/{flag_id}/activity/", flag_activity, "A feature flag's history"),
    ("GET", P + "/activity_log/", activity_log, "The project's activity log, newest first"),
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
    ("GET", P + "/scheduled_changes/", list_scheduled_changes, "List scheduled flag changes"),
    (
        "POST",
        P + "/scheduled_changes/",
        create_scheduled_change,
        "Schedule a flag change (turn on/off, add a condition, variants, rollout)",
    ),
    (
        "DELETE",
        P + "/scheduled_changes/{change_id}/",
        delete_scheduled_change,
        "Cancel a scheduled change that has not run",
    ),
    ("GET", "/api/personal_api_keys/", list_keys, "List personal API keys"),
    ("POST", "/api/personal_api_keys/", create_key, "Create a personal API key (shown once)"),
    ("DELETE", "/api/personal_api_keys/{key_id}/", revoke_key, "Revoke a personal API key"),
    *[(method, P + path, h, doc) for method, path, h, doc in admin_experiments.ROUTES],
    *[(method, P + path, h, doc) for method, path, h, doc in admin_team.ROUTES],
    *admin_approvals.ROUTES,
    *admin_webhooks.ROUTES,
    *[(method, P + path, h, doc) for method, path, h, doc in admin_usage.ROUTES],
]

# Routes whose action is not the method's default: creating a project needs an admin; anyone
# with access lists and creates their own keys (revocation is checked per key).
ROUTE_ACTIONS: dict[Handler, Action] = {
    create_project: Action.MANAGE,
    list_keys: Action.VIEW,
    create_key: Action.VIEW,
    revoke_key: Action.VIEW,
    **admin_team.ROUTE_ACTIONS,
    **admin_approvals.ROUTE_ACTIONS,
    **admin_webhooks.ROUTE_ACTIONS,
}


def _endpoint(
    handler: Handler, store: Store, accounts: AccountStore, authenticate: Authenticate
) -> Callable[..., Any]:
    action = ROUTE_ACTIONS.get(handler)

    async def endpoint(request: Request) -> Response:
        principal = await authenticate(request)
        require(principal, action or action_for_method(request.method))
        ctx = Caller(
            store=store, accounts=accounts, project_id=principal.project_id, principal=principal
        )
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


def build_routes(
    store: Store, authenticate: Authenticate, accounts: AccountStore | None = None
) -> list[Route]:
    """``accounts`` defaults to the store (both engines implement :class:`AccountStore`)."""
    account_store: AccountStore = accounts if accounts is not None else store
    grouped: dict[str, dict[str, Handler]] = {}
    for method, path, handler, _ in ROUTES:
        grouped.setdefault(path, {})[method] = handler
    routes = []
    for path, handlers in grouped.items():
        endpoints = {
            m: _endpoint(h, store, account_store, authenticate) for m, h in handlers.items()
        }

        async def dispatch(request: Request, endpoints: dict[str, Any] = endpoints) -> Response:
            return await endpoints[request.method](request)

        routes.append(Route(path, dispatch, methods=list(handlers)))
    return routes


def build_admin(
    store: Store,
    authenticate: Authenticate,
    extra_routes: Sequence[BaseRoute],
    accounts: AccountStore | None = None,
) -> Starlette:
    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        headers = {"retry-after": RETRY_AFTER} if exc.status == 503 else None
        return Response(exc.body(), exc.status, headers=headers, media_type="application/json")

    async def on_http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        detail = getattr(exc, "detail", "error")
        code = {404: "not_found", 405: "method_not_allowed"}.get(status, "error")
        return Response(
            ApiError(status, code, str(detail)).body(), status, media_type="application/json"
        )

    async def on_unhandled(request: Request, exc: Exception) -> Response:
        refusal = store_unavailable(exc, request.url.path)
        if refusal is not None:
            return await on_api_error(request, refusal)
        logs.logger.exception("unhandled error on %s", request.url.path, exc_info=exc)
        body = ApiError(500, "server_error", "the server failed to answer").body()
        return Response(body, 500, media_type="application/json")

    from starlette.exceptions import HTTPException

    routes = [
        *build_routes(store, authenticate, accounts),
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
