"""Outgoing webhooks: a project's endpoints (at most :data:`MAX_WEBHOOKS`), their deliveries
and redelivery, for the management API (admins) and the console's webhooks page.

The secret that signs deliveries is answered once: when the webhook is created, and when a
change rotates it. Targets must be http(s) URLs without credentials
(:func:`~flagstaff.activity.webhooks.webhook_url_problem`); they are called from the server, so
an admin can point one at any address the server reaches (see ``docs/operations.md``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Protocol

import msgspec

from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.activity.webhooks import (
    RETRY_DELAYS_S,
    TIMEOUT_S,
    Delivery,
    Webhook,
    after_attempt,
    new_webhook_secret,
    webhook_json,
    webhook_url_problem,
)
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, existing
from flagstaff.application.inputs import UNSET, UnsetType, given
from flagstaff.common import clock
from flagstaff.common.clock import ms_to_iso
from flagstaff.store.base import Conflict, Page
from flagstaff.store.webhook_rows import ClaimedDelivery

__all__ = [
    "MAX_DESCRIPTION",
    "MAX_WEBHOOKS",
    "CreatedWebhook",
    "UpdatedWebhook",
    "WebhookInput",
    "WebhookReads",
    "WebhookStore",
    "WebhookUpdate",
    "create_webhook",
    "created_webhook_json",
    "delete_webhook",
    "deliveries_page",
    "get_webhook",
    "list_deliveries",
    "list_webhooks",
    "project_webhooks",
    "redeliver",
    "update_webhook",
    "updated_webhook_json",
]

MAX_WEBHOOKS = 20
"""Per project: each change is sent to every matching endpoint."""
MAX_DESCRIPTION = 500
_SCOPES = ", ".join(s.value for s in Scope)


class _WebhookFields(msgspec.Struct, kw_only=True):
    scopes: list[str] | UnsetType = UNSET
    """Activity scopes sent (FeatureFlag, Cohort, ChangeRequest...); empty (the default):
    every change."""
    enabled: bool | UnsetType = UNSET
    """Whether changes are sent (default true)."""
    description: Annotated[str, msgspec.Meta(max_length=MAX_DESCRIPTION)] | UnsetType = UNSET


class WebhookInput(_WebhookFields, kw_only=True):
    """A new webhook."""

    url: str
    """http:// or https://, no credentials; called from the server."""


class WebhookUpdate(_WebhookFields, kw_only=True):
    """The fields a PATCH changes (any of them), and whether to make a new signing secret."""

    url: str | UnsetType = UNSET
    rotate_secret: bool = False
    """Make a new signing secret (in that answer only)."""


class WebhookReads(Protocol):
    """A project's webhooks and their deliveries as they are (what the console's webhooks
    page reads)."""

    async def list_webhooks(self, project_id: int) -> list[Webhook]: ...

    async def list_deliveries(
        self, project_id: int, webhook_id: int, limit: int, offset: int
    ) -> Page: ...


class WebhookStore(WebhookReads, Protocol):
    """A project's webhooks and their deliveries."""

    async def get_webhook(self, project_id: int, webhook_id: int) -> Webhook | None: ...

    async def create_webhook(self, webhook: Webhook, source: ChangeSource) -> Webhook: ...

    async def update_webhook(
        self,
        project_id: int,
        webhook_id: int,
        changes: dict[str, Any],
        source: ChangeSource,
        now_ms: int,
    ) -> Webhook | None: ...

    async def delete_webhook(
        self, project_id: int, webhook_id: int, source: ChangeSource, now_ms: int
    ) -> bool: ...

    async def redeliver(
        self, project_id: int, webhook_id: int, delivery_id: int, now_ms: int
    ) -> Delivery | None: ...


class CreatedWebhook(msgspec.Struct, frozen=True):
    """A new webhook and its signing secret (answered this once)."""

    webhook: Webhook
    secret: str


class UpdatedWebhook(msgspec.Struct, frozen=True):
    """A changed webhook and, when the change rotated it, its new signing secret (answered
    this once)."""

    webhook: Webhook
    new_secret: str | None = None


def created_webhook_json(created: CreatedWebhook) -> dict[str, Any]:
    return {**webhook_json(created.webhook, ms_to_iso), "secret": created.secret}


def updated_webhook_json(updated: UpdatedWebhook) -> dict[str, Any]:
    answer = webhook_json(updated.webhook, ms_to_iso)
    if updated.new_secret is not None:
        answer["secret"] = updated.new_secret
    return answer


def _changes(body: WebhookInput | WebhookUpdate) -> dict[str, Any]:
    """The webhook fields ``body`` sets, checked (400 naming the field)."""
    out = given(body)
    out.pop("rotate_secret", None)
    if "url" in out:
        problem = webhook_url_problem(out["url"])
        if problem is not None:
            raise ApiError(400, "invalid_input", problem, "url")
    if "scopes" in out:
        known = {s.value for s in Scope}
        if not all(s in known for s in out["scopes"]):
            raise ApiError(
                400,
                "invalid_input",
                f"scopes must be a list of {_SCOPES} (empty: every change)",
                "scopes",
            )
        out["scopes"] = list(dict.fromkeys(out["scopes"]))
    return out


async def project_webhooks(store: WebhookReads, project_id: int) -> list[Webhook]:
    """The project's webhooks, as they are."""
    return await store.list_webhooks(project_id)


async def deliveries_page(
    store: WebhookReads, project_id: int, webhook_id: int, limit: int, offset: int
) -> Page:
    """A webhook's deliveries, newest first: how many, and one page."""
    return await store.list_deliveries(project_id, webhook_id, limit, offset)


async def list_webhooks(caller: Caller[WebhookStore]) -> list[Webhook]:
    return await project_webhooks(caller.store, caller.project_id)


async def get_webhook(caller: Caller[WebhookStore], webhook_id: int) -> Webhook:
    return existing(await caller.store.get_webhook(caller.project_id, webhook_id), "webhook")


async def create_webhook(caller: Caller[WebhookStore], body: WebhookInput) -> CreatedWebhook:
    """The new webhook with its ``secret`` (in this answer only)."""
    fields = _changes(body)
    if len(await caller.store.list_webhooks(caller.project_id)) >= MAX_WEBHOOKS:
        raise ApiError(400, "invalid_input", f"a project has at most {MAX_WEBHOOKS} webhooks")
    secret = new_webhook_secret()
    made = await caller.store.create_webhook(
        Webhook(
            id=0,
            project_id=caller.project_id,
            url=fields["url"],
            secret=secret,
            enabled=fields.get("enabled", True),
            scopes=fields.get("scopes", []),
            description=fields.get("description", ""),
            created_at_ms=clock.now_ms(),
            created_by=caller.principal.user_id,
        ),
        caller.source,
    )
    return CreatedWebhook(made, secret)


async def update_webhook(
    caller: Caller[WebhookStore], webhook_id: int, body: WebhookUpdate
) -> UpdatedWebhook:
    """Change url, scopes, enabled, description; ``rotate_secret`` makes a new secret (in this
    answer only; deliveries not yet sent are signed with it)."""
    found = await get_webhook(caller, webhook_id)
    changes = _changes(body)
    if body.rotate_secret:
        changes["secret"] = new_webhook_secret()
    updated = await caller.store.update_webhook(
        caller.project_id, found.id, changes, caller.source, clock.now_ms()
    )
    if updated is None:
        raise ApiError(404, "not_found", "no such webhook")
    return UpdatedWebhook(updated, changes["secret"] if body.rotate_secret else None)


async def delete_webhook(caller: Caller[WebhookStore], webhook_id: int) -> None:
    """The webhook and its deliveries."""
    found = await get_webhook(caller, webhook_id)
    await caller.store.delete_webhook(caller.project_id, found.id, caller.source, clock.now_ms())


async def list_deliveries(
    caller: Caller[WebhookStore], webhook_id: int, limit: int, offset: int
) -> Page:
    """A webhook's deliveries, newest first: how many, and one page."""
    found = await get_webhook(caller, webhook_id)
    return await deliveries_page(caller.store, caller.project_id, found.id, limit, offset)


async def redeliver(caller: Caller[WebhookStore], webhook_id: int, delivery_id: int) -> Delivery:
    """Send a delivery again now, with a fresh retry schedule (the same body, signed anew);
    409 while it is being sent."""
    found = await get_webhook(caller, webhook_id)
    try:
        again = await caller.store.redeliver(
            caller.project_id, found.id, delivery_id, clock.now_ms()
        )
    except Conflict as exc:
        raise ApiError(409, "in_flight", exc.message) from None
    if again is None:
        raise ApiError(404, "not_found", "no such delivery")
    return again


# delivering ------------------------------------------------------------------------------------

DELIVERY_BATCH = 20
"""Due deliveries claimed by one poll."""
LEASE_MS = int(TIMEOUT_S * 1000) * 6
"""How long a claimed delivery is the claimer's: longer than a request may take, so no two
workers send it at once; a worker that dies mid-send leaves it to be taken again after."""


class Attempt(msgspec.Struct, frozen=True):
    """What sending one delivery gave: the receiver's status (None: no answer), the error to
    keep (empty when it took it), and how long it took."""

    code: int | None
    error: str
    duration_ms: int


class DeliveryQueue(Protocol):
    async def claim_deliveries(
        self, now_ms: int, limit: int, lease_ms: int
    ) -> list[ClaimedDelivery]: ...

    async def finish_delivery(self, delivery: Delivery, lease_token: str) -> bool: ...


async def deliver_due(
    queue: DeliveryQueue,
    send: Callable[[ClaimedDelivery], Awaitable[Attempt]],
    now_ms: int,
    delays_s: Sequence[float] = RETRY_DELAYS_S,
) -> int:
    """Claim what is due (leased for :data:`LEASE_MS`), send it all at once, and record each
    outcome and its next attempt (only the lease holder's outcome is kept); how many were
    claimed."""
    claimed = await queue.claim_deliveries(now_ms, DELIVERY_BATCH, LEASE_MS)

    async def one(item: ClaimedDelivery) -> None:
        sent = await send(item)
        outcome = after_attempt(
            item.delivery, sent.code, sent.error, clock.now_ms(), delays_s, sent.duration_ms
        )
        await queue.finish_delivery(outcome, item.lease_token)

    await asyncio.gather(*(one(item) for item in claimed))
    return len(claimed)
