"""OpenAPI bodies of the approval and webhook routes (ours: PostHog has neither API)."""

from __future__ import annotations

from typing import Any

import msgspec


class UserRef(msgspec.Struct):
    id: int


class ApprovalPolicy(msgspec.Struct):
    enabled: bool
    """On: flag updates, deletes, rollbacks and new scheduled changes wait for approval."""
    updated_at: str | None
    updated_by: UserRef | None


class ScheduledChangeRequest(msgspec.Struct):
    payload: dict[str, Any]
    """As a scheduled change's ``payload``: ``{"operation", "value"}``."""
    scheduled_at: str


class ChangeRequest(msgspec.Struct):
    """A flag change waiting for a second person (answered 202 by the write it holds)."""

    id: int
    kind: str
    """``update`` (PATCH, PUT, rollback), ``delete`` or ``schedule``."""
    status: str
    """``pending``, ``applied``, ``rejected`` or ``stale`` (the flag changed meanwhile)."""
    model_name: str
    record_id: str | None
    """The feature flag's id."""
    base_version: int | None
    """The flag's version the change was made from; approving needs it unchanged."""
    flag: dict[str, Any] | None
    """update, delete: the whole flag that approving writes."""
    scheduled_change: ScheduledChangeRequest | None
    """schedule: the scheduled change that approving creates."""
    changes: list[dict[str, Any]] | None
    """Pending updates and deletes: what approving would change in the flag as it is now
    (activity-log ``changes``); null once decided."""
    created_by: UserRef | None
    created_at: str
    decided_by: UserRef | None
    decided_at: str | None
    comment: str


class ChangeRequestPage(msgspec.Struct):
    count: int
    next: str | None
    previous: str | None
    results: list[ChangeRequest]


class Webhook(msgspec.Struct):
    id: int
    url: str
    enabled: bool
    scopes: list[str]
    description: str
    created_at: str
    created_by: UserRef | None


class CreatedWebhook(Webhook):
    secret: str
    """Signs every delivery (X-Flagstaff-Signature: t=<unix s>,v1=HMAC-SHA256(secret,
    "<t>." + body)); shown in this answer only."""


class WebhookPage(msgspec.Struct):
    count: int
    next: str | None
    previous: str | None
    results: list[Webhook]


class WebhookDelivery(msgspec.Struct):
    id: int
    """Also sent as X-Flagstaff-Delivery: receivers drop a delivery id seen before."""
    webhook_id: int
    activity_id: int
    event: str
    """e.g. feature_flag.updated (X-Flagstaff-Event)."""
    status: str
    """pending, succeeded or failed (retries given up)."""
    attempts: int
    next_attempt_at: str | None
    last_status_code: int | None
    last_error: str
    last_attempt_at: str | None
    last_duration_ms: int | None
    created_at: str


class WebhookDeliveryPage(msgspec.Struct):
    count: int
    next: str | None
    previous: str | None
    results: list[WebhookDelivery]
