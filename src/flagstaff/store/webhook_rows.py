"""Row mapping for webhooks and their deliveries, and the deliveries an activity row implies,
shared by both engines."""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.activity.records import ActivityRecord, Actor, StoredActivity
from flagstaff.activity.webhooks import (
    Delivery,
    DeliveryStatus,
    Webhook,
    event_name,
    payload_bytes,
    scope_matches,
)
from flagstaff.common.clock import ms_to_iso

_decode = msgspec.json.decode

WEBHOOK_COLUMNS = (
    "id, project_id, url, secret, enabled, scopes, description, created_at_ms, created_by"
)
DELIVERY_COLUMNS = (
    "id, webhook_id, activity_id, status, attempts, next_attempt_ms, created_at_ms, "
    "last_status_code, last_error, event, last_attempt_ms, last_duration_ms"
)


def webhook_record(row: Any) -> Webhook:
    scopes = row[5] if isinstance(row[5], list) else _decode(row[5])
    return Webhook(
        id=int(row[0]),
        project_id=int(row[1]),
        url=row[2],
        secret=row[3],
        enabled=bool(row[4]),
        scopes=list(scopes),
        description=row[6],
        created_at_ms=int(row[7]),
        created_by=row[8],
    )


def delivery_record(row: Any) -> Delivery:
    return Delivery(
        id=int(row[0]),
        webhook_id=int(row[1]),
        activity_id=int(row[2]),
        status=DeliveryStatus(row[3]),
        attempts=int(row[4]),
        next_attempt_ms=row[5],
        created_at_ms=int(row[6]),
        last_status_code=row[7],
        last_error=row[8],
        event=row[9],
        last_attempt_ms=row[10],
        last_duration_ms=row[11],
    )


class ClaimedDelivery(msgspec.Struct, frozen=True):
    """A delivery a worker holds the lease of, with what it needs to send it."""

    delivery: Delivery
    url: str
    secret: str
    body: bytes
    lease_token: str


class NewDelivery(msgspec.Struct, frozen=True):
    webhook_id: int
    event: str
    body: str


def deliveries_for(
    record: ActivityRecord,
    activity_id: int,
    activity_uuid: str,
    hooks: list[tuple[int, list[str]]],
    user: tuple[str, str] | None,
) -> list[NewDelivery]:
    """The deliveries of one activity row to the project's enabled ``hooks`` (id, scopes)
    whose scopes match; ``user`` is the actor's (email, first name) when they have a row."""
    actor = record.actor
    if user is not None:
        actor = Actor(actor.user_id, user[0], user[1], actor.is_system)
    stored = StoredActivity(
        activity_id, activity_uuid, msgspec.structs.replace(record, actor=actor)
    )
    matching = [hook_id for hook_id, scopes in hooks if scope_matches(scopes, stored)]
    if not matching:
        return []
    body = payload_bytes(stored, ms_to_iso).decode()
    event = event_name(stored)
    return [NewDelivery(hook_id, event, body) for hook_id in matching]


def webhook_activity(webhook: Webhook, secret_rotated: bool = False) -> dict[str, Any]:
    """What the activity log keeps of a webhook (never its secret)."""
    shown: dict[str, Any] = {
        "name": webhook.url,
        "url": webhook.url,
        "enabled": webhook.enabled,
        "scopes": webhook.scopes,
        "description": webhook.description,
    }
    if secret_rotated:
        shown["secret_rotated"] = True
    return shown
