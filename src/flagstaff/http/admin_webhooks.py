"""Outgoing webhooks on the management API (admins only): endpoints per project
(``/webhooks/``: create, list, get, PATCH, DELETE), their deliveries and redelivery.

The secret that signs deliveries is in the creating answer only (and in the answer of a PATCH
with ``rotate_secret``). Targets must be http(s) URLs without credentials; they are called
from the server, so an admin can point one at any address the server reaches (see
``docs/operations.md``). Redirects are not followed.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from flagstaff.accounts.roles import Action
from flagstaff.activity.records import Scope
from flagstaff.activity.webhooks import (
    Webhook,
    delivery_json,
    new_webhook_secret,
    webhook_json,
    webhook_url_problem,
)
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.common import clock
from flagstaff.common.clock import ms_to_iso
from flagstaff.http.admin_context import Handler
from flagstaff.http.rest import int_param, json_body, paginated, path_int
from flagstaff.store.base import Conflict, Store

P = "/api/projects/{project_id}"
MAX_WEBHOOKS = 20
"""Per project: each change is sent to every matching endpoint."""
MAX_DESCRIPTION = 500


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_input", "the request body must be a JSON object")
    return body


def _fields(body: dict[str, Any]) -> dict[str, Any]:
    """The webhook fields ``body`` sets, checked (400 naming the field)."""
    out: dict[str, Any] = {}
    if "url" in body:
        url = body["url"]
        problem = (
            webhook_url_problem(url) if isinstance(url, str) else "the webhook URL must be text"
        )
        if problem is not None:
            raise ApiError(400, "invalid_input", problem, "url")
        out["url"] = url
    if "scopes" in body:
        scopes = body["scopes"]
        known = [s.value for s in Scope]
        if not isinstance(scopes, list) or not all(s in known for s in scopes):
            raise ApiError(
                400,
                "invalid_input",
                f"scopes must be a list of {', '.join(known)} (empty: every change)",
                "scopes",
            )
        out["scopes"] = list(dict.fromkeys(scopes))
    if "enabled" in body:
        if not isinstance(body["enabled"], bool):
            raise ApiError(400, "invalid_input", "enabled must be true or false", "enabled")
        out["enabled"] = body["enabled"]
    if "description" in body:
        text = body["description"]
        if not isinstance(text, str) or len(text) > MAX_DESCRIPTION:
            raise ApiError(
                400,
                "invalid_input",
                f"description must be text of at most {MAX_DESCRIPTION} characters",
                "description",
            )
        out["description"] = text
    return out


async def _existing(ctx: Caller[Store], request: Request) -> Webhook:
    found = await ctx.store.get_webhook(ctx.project_id, path_int(request, "webhook_id"))
    if found is None:
        raise ApiError(404, "not_found", "no such webhook")
    return found


async def list_webhooks(ctx: Caller[Store], request: Request) -> Any:
    hooks = await ctx.store.list_webhooks(ctx.project_id)
    results = [webhook_json(h, ms_to_iso) for h in hooks]
    return {"count": len(results), "next": None, "previous": None, "results": results}


async def create_webhook(ctx: Caller[Store], request: Request) -> Any:
    body = _object(await json_body(request))
    if "url" not in body:
        raise ApiError(400, "required", "url is required", "url")
    fields = _fields(body)
    if len(await ctx.store.list_webhooks(ctx.project_id)) >= MAX_WEBHOOKS:
        raise ApiError(400, "invalid_input", f"a project has at most {MAX_WEBHOOKS} webhooks")
    secret = new_webhook_secret()
    made = await ctx.store.create_webhook(
        Webhook(
            id=0,
            project_id=ctx.project_id,
            url=fields["url"],
            secret=secret,
            enabled=fields.get("enabled", True),
            scopes=fields.get("scopes", []),
            description=fields.get("description", ""),
            created_at_ms=clock.now_ms(),
            created_by=ctx.principal.user_id,
        ),
        ctx.source,
    )
    return 201, {**webhook_json(made, ms_to_iso), "secret": secret}


async def get_webhook(ctx: Caller[Store], request: Request) -> Any:
    return webhook_json(await _existing(ctx, request), ms_to_iso)


async def update_webhook(ctx: Caller[Store], request: Request) -> Any:
    """Change url, scopes, enabled, description; ``rotate_secret: true`` makes a new secret
    (in this answer only; deliveries not yet sent are signed with it)."""
    body = _object(await json_body(request))
    found = await _existing(ctx, request)
    changes = _fields(body)
    rotate = body.get("rotate_secret", False)
    if not isinstance(rotate, bool):
        raise ApiError(400, "invalid_input", "rotate_secret must be true or false", "rotate_secret")
    if rotate:
        changes["secret"] = new_webhook_secret()
    updated = await ctx.store.update_webhook(
        ctx.project_id, found.id, changes, ctx.source, clock.now_ms()
    )
    if updated is None:
        raise ApiError(404, "not_found", "no such webhook")
    answer = webhook_json(updated, ms_to_iso)
    if rotate:
        answer["secret"] = changes["secret"]
    return answer


async def delete_webhook(ctx: Caller[Store], request: Request) -> Any:
    found = await _existing(ctx, request)
    await ctx.store.delete_webhook(ctx.project_id, found.id, ctx.source, clock.now_ms())
    return 204, None


async def list_deliveries(ctx: Caller[Store], request: Request) -> Any:
    """Newest first, paged by ``limit`` and ``offset``."""
    found = await _existing(ctx, request)
    limit = int_param(request, "limit", 50, 500) or 50
    offset = int_param(request, "offset", 0)
    page = await ctx.store.list_deliveries(ctx.project_id, found.id, limit, offset)
    results = [delivery_json(d, ms_to_iso) for d in page.results]
    return paginated(request, page.count, results, limit, offset)


async def redeliver(ctx: Caller[Store], request: Request) -> Any:
    """Send a delivery again now, with a fresh retry schedule (the same body, signed anew)."""
    found = await _existing(ctx, request)
    delivery_id = path_int(request, "delivery_id")
    try:
        again = await ctx.store.redeliver(ctx.project_id, found.id, delivery_id, clock.now_ms())
    except Conflict as exc:
        raise ApiError(409, "in_flight", exc.message) from None
    if again is None:
        raise ApiError(404, "not_found", "no such delivery")
    return 202, delivery_json(again, ms_to_iso)


W = P + "/webhooks/{webhook_id}/"
ROUTES = [
    ("GET", P + "/webhooks/", list_webhooks, "List the project's outgoing webhooks (admins)"),
    (
        "POST",
        P + "/webhooks/",
        create_webhook,
        "Create an outgoing webhook; its signing secret is in this answer only (admins)",
    ),
    ("GET", W, get_webhook, "Get an outgoing webhook (admins)"),
    ("PATCH", W, update_webhook, "Change or disable a webhook, or rotate its secret (admins)"),
    ("DELETE", W, delete_webhook, "Delete a webhook and its deliveries (admins)"),
    ("GET", W + "deliveries/", list_deliveries, "A webhook's deliveries, newest first (admins)"),
    (
        "POST",
        W + "deliveries/{delivery_id}/redeliver/",
        redeliver,
        "Send a delivery again now (admins)",
    ),
]

ROUTE_ACTIONS: dict[Handler, Action] = {handler: Action.MANAGE for _, _, handler, _ in ROUTES}
