"""Outgoing webhooks on the management API (admins only): endpoints per project
(``/webhooks/``: create, list, get, PATCH, DELETE), their deliveries and redelivery. What they
do (the URL and scope rules, the secret shown once): ``application/webhooks.py``. Redirects are
not followed.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from flagstaff.accounts.roles import Action
from flagstaff.activity.webhooks import delivery_json, webhook_json
from flagstaff.application import webhooks
from flagstaff.application.context import Caller
from flagstaff.application.inputs import decode
from flagstaff.application.webhooks import (
    WebhookInput,
    WebhookUpdate,
    created_webhook_json,
    updated_webhook_json,
)
from flagstaff.common.clock import ms_to_iso
from flagstaff.http.admin_context import Handler
from flagstaff.http.rest import int_param, json_body, paginated, path_int
from flagstaff.store.base import Store

P = "/api/projects/{project_id}"


def _webhook_id(request: Request) -> int:
    return path_int(request, "webhook_id")


async def list_webhooks(ctx: Caller[Store], request: Request) -> Any:
    results = [webhook_json(h, ms_to_iso) for h in await webhooks.list_webhooks(ctx)]
    return {"count": len(results), "next": None, "previous": None, "results": results}


async def create_webhook(ctx: Caller[Store], request: Request) -> Any:
    body = decode(WebhookInput, await json_body(request))
    return 201, created_webhook_json(await webhooks.create_webhook(ctx, body))


async def get_webhook(ctx: Caller[Store], request: Request) -> Any:
    return webhook_json(await webhooks.get_webhook(ctx, _webhook_id(request)), ms_to_iso)


async def update_webhook(ctx: Caller[Store], request: Request) -> Any:
    """Change url, scopes, enabled, description; ``rotate_secret: true`` makes a new secret
    (in this answer only; deliveries not yet sent are signed with it)."""
    body = decode(WebhookUpdate, await json_body(request))
    return updated_webhook_json(await webhooks.update_webhook(ctx, _webhook_id(request), body))


async def delete_webhook(ctx: Caller[Store], request: Request) -> Any:
    await webhooks.delete_webhook(ctx, _webhook_id(request))
    return 204, None


async def list_deliveries(ctx: Caller[Store], request: Request) -> Any:
    """Newest first, paged by ``limit`` and ``offset``."""
    webhook_id = _webhook_id(request)
    limit = int_param(request, "limit", 50, 500) or 50
    offset = int_param(request, "offset", 0)
    page = await webhooks.list_deliveries(ctx, webhook_id, limit, offset)
    results = [delivery_json(d, ms_to_iso) for d in page.results]
    return paginated(request, page.count, results, limit, offset)


async def redeliver(ctx: Caller[Store], request: Request) -> Any:
    """Send a delivery again now, with a fresh retry schedule (the same body, signed anew)."""
    again = await webhooks.redeliver(ctx, _webhook_id(request), path_int(request, "delivery_id"))
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
