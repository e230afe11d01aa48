"""View-models of the approvals and webhooks pages (pure): change requests with their readable
diff, webhooks with their recent deliveries."""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.accounts.roles import Principal, can_approve
from flagstaff.activity.approvals import (
    ChangeRequest,
    RequestKind,
    RequestStatus,
    is_author,
    stale_reason,
)
from flagstaff.activity.diff import FIELD_EXCLUSIONS
from flagstaff.activity.readable import DiffLine, readable_diff
from flagstaff.activity.records import Scope
from flagstaff.activity.webhooks import Delivery, Webhook
from flagstaff.console.views import describe_scheduled
from flagstaff.flags.records import FeatureFlag, flag_json

KIND_LABELS = {
    RequestKind.UPDATE: "Change",
    RequestKind.DELETE: "Delete",
    RequestKind.SCHEDULE: "Schedule",
}
RECENT_DECIDED = 20
RECENT_DELIVERIES = 10
SCOPE_CHOICES = [s.value for s in Scope]


class RequestRow(msgspec.Struct, frozen=True):
    id: int
    flag_id: int | None
    flag_key: str
    kind: str
    status: str
    author: str
    created_at_ms: int
    lines: list[DiffLine]
    schedule: str  # a schedule request in words, with its time
    run_at_ms: int | None
    stale: str  # why approving would fail now, or ""
    own: bool  # the viewer made it: they may withdraw, not approve
    may_approve: bool
    decided_by: str
    decided_at_ms: int | None
    comment: str


def _shown(flag: dict[str, Any] | None) -> dict[str, Any]:
    excluded = FIELD_EXCLUSIONS[Scope.FEATURE_FLAG]
    return {k: v for k, v in (flag or {}).items() if k not in excluded}


def _who(user_id: int | None, emails: dict[int, str]) -> str:
    if user_id is None:
        return "a personal API key"
    return emails.get(user_id, f"user {user_id}")


def request_row(
    request: ChangeRequest,
    current: FeatureFlag | None,
    emails: dict[int, str],
    viewer: Principal,
    now_ms: int,
) -> RequestRow:
    """One request as the page shows it; ``current`` is its flag now (None: gone)."""
    key = current.key if current is not None else str(request.body.get("key") or request.flag_id)
    lines: list[DiffLine] = []
    schedule, run_at = "", None
    if request.kind is RequestKind.SCHEDULE:
        schedule = describe_scheduled(request.body.get("payload") or {})
        run_at = int(request.body.get("run_at_ms") or 0)
    elif request.status is RequestStatus.PENDING:
        shown = _shown(flag_json(current) if current is not None else None)
        lines = readable_diff(shown, _shown(request.body))
    stale = ""
    if request.status is RequestStatus.PENDING:
        live = current if current is not None and not current.deleted else None
        stale = stale_reason(request, live.version if live else None, now_ms) or ""
    return RequestRow(
        id=request.id,
        flag_id=request.flag_id,
        flag_key=key,
        kind=KIND_LABELS[request.kind],
        status=request.status.value,
        author=_who(request.author_user_id, emails),
        created_at_ms=request.created_at_ms,
        lines=lines,
        schedule=schedule,
        run_at_ms=run_at,
        stale=stale,
        own=is_author(request, viewer),
        may_approve=can_approve(viewer, request.author_user_id, request.author_key_id) is None,
        decided_by=_who(request.decided_by, emails) if request.decided_at_ms else "",
        decided_at_ms=request.decided_at_ms,
        comment=request.comment,
    )


class DeliveryRow(msgspec.Struct, frozen=True):
    id: int
    event: str
    status: str
    attempts: int
    created_at_ms: int
    last_status: str  # "200", "no answer", ""
    last_error: str
    last_duration_ms: int | None
    next_attempt_ms: int | None


class WebhookRow(msgspec.Struct, frozen=True):
    id: int
    url: str
    enabled: bool
    scopes: str
    description: str
    created_at_ms: int
    deliveries: list[DeliveryRow]


def delivery_row(delivery: Delivery) -> DeliveryRow:
    if delivery.last_status_code is not None:
        last = str(delivery.last_status_code)
    else:
        last = "no answer" if delivery.attempts else ""
    return DeliveryRow(
        id=delivery.id,
        event=delivery.event,
        status=delivery.status.value,
        attempts=delivery.attempts,
        created_at_ms=delivery.created_at_ms,
        last_status=last,
        last_error=delivery.last_error,
        last_duration_ms=delivery.last_duration_ms,
        next_attempt_ms=delivery.next_attempt_ms if delivery.status == "pending" else None,
    )


def webhook_row(webhook: Webhook, deliveries: list[Delivery]) -> WebhookRow:
    return WebhookRow(
        id=webhook.id,
        url=webhook.url,
        enabled=webhook.enabled,
        scopes=", ".join(webhook.scopes) or "every change",
        description=webhook.description,
        created_at_ms=webhook.created_at_ms,
        deliveries=[delivery_row(d) for d in deliveries],
    )
