"""Outgoing webhooks' pure part: the payload, its HMAC-SHA256 signature, the retry schedule.

The receiver checks ``X-Flagstaff-Signature: t=<unix seconds>,v1=<hex>`` where the hex is
HMAC-SHA256(secret, "<t>." + body). The timestamp inside the signed text stops replays of old
deliveries: a receiver refuses those older than its tolerance (as the tests' receiver does,
``tests/webhook_receiver.py``).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import msgspec

from flagstaff.activity.api import IsoTime, activity_json
from flagstaff.activity.records import StoredActivity

SIGNATURE_HEADER = "X-Flagstaff-Signature"
EVENT_HEADER = "X-Flagstaff-Event"
DELIVERY_HEADER = "X-Flagstaff-Delivery"
SIGNATURE_VERSION = "v1"
TIMEOUT_S = 10.0
# Delay before each retry; a delivery is tried at most len(RETRY_DELAYS_S) + 1 times (~8 h).
RETRY_DELAYS_S: tuple[float, ...] = (10, 60, 300, 1_800, 7_200, 21_600)
MAX_URL_LENGTH = 2000
_RETRYABLE_4XX = frozenset({408, 409, 425, 429})


def new_webhook_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def webhook_url_problem(url: str) -> str | None:
    if len(url) > MAX_URL_LENGTH:
        return f"the webhook URL is longer than {MAX_URL_LENGTH} characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError:
        return "the webhook URL is not a valid URL"
    if any(c.isspace() or ord(c) < 32 for c in url):
        return "the webhook URL must not contain spaces or control characters"
    if parts.scheme not in ("http", "https"):
        return "the webhook URL must start with http:// or https://"
    if not parts.hostname:
        return "the webhook URL needs a host"
    if parts.username or parts.password:
        return "the webhook URL must not carry credentials; use the signing secret"
    return None


def event_name(stored: StoredActivity) -> str:
    """e.g. ``feature_flag.updated``."""
    scope = stored.record.scope.value
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in scope).lstrip("_")
    return f"{snake.replace('a_p_i', 'api')}.{stored.record.activity.value}"


def scope_matches(subscribed: list[str], stored: StoredActivity) -> bool:
    """An empty subscription means every scope."""
    return not subscribed or stored.record.scope.value in subscribed


def payload_bytes(stored: StoredActivity, iso: IsoTime) -> bytes:
    """The body sent (and stored with the delivery, so retries send the same bytes)."""
    return msgspec.json.encode(
        {
            "event": event_name(stored),
            "project_id": stored.record.project_id,
            "activity": activity_json(stored, iso),
        }
    )


def sign(secret: str, timestamp_s: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp_s}.".encode() + body, hashlib.sha256)
    return mac.hexdigest()


def signature_header(secret: str, timestamp_s: int, body: bytes) -> str:
    return f"t={timestamp_s},{SIGNATURE_VERSION}={sign(secret, timestamp_s, body)}"


def request_headers(
    secret: str, timestamp_s: int, body: bytes, event: str, delivery_id: int
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "Flagstaff-Webhooks/1",
        SIGNATURE_HEADER: signature_header(secret, timestamp_s, body),
        EVENT_HEADER: event,
        DELIVERY_HEADER: str(delivery_id),
    }


class Webhook(msgspec.Struct, frozen=True):
    """An endpoint of a project that is sent the project's activity (``scopes`` empty: all)."""

    id: int
    project_id: int
    url: str
    secret: str
    enabled: bool
    scopes: list[str]
    description: str
    created_at_ms: int
    created_by: int | None = None


def webhook_json(webhook: Webhook, iso: IsoTime) -> dict[str, Any]:
    """A webhook as the API shows it: never its secret (shown once, at creation)."""
    return {
        "id": webhook.id,
        "url": webhook.url,
        "enabled": webhook.enabled,
        "scopes": webhook.scopes,
        "description": webhook.description,
        "created_at": iso(webhook.created_at_ms),
        "created_by": {"id": webhook.created_by} if webhook.created_by is not None else None,
    }


class DeliveryStatus(enum.StrEnum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Delivery(msgspec.Struct, frozen=True):
    id: int
    webhook_id: int
    activity_id: int
    status: DeliveryStatus
    attempts: int
    next_attempt_ms: int | None
    created_at_ms: int
    last_status_code: int | None = None
    last_error: str = ""
    event: str = ""
    last_attempt_ms: int | None = None
    last_duration_ms: int | None = None


def should_retry(status_code: int | None) -> bool:
    """No answer (``None``: timeout, refused, TLS error), 5xx and a few 4xx are retried."""
    if status_code is None or status_code >= 500:
        return True
    return status_code in _RETRYABLE_4XX


def after_attempt(
    delivery: Delivery,
    status_code: int | None,
    error: str,
    now_ms: int,
    delays_s: Sequence[float] = RETRY_DELAYS_S,
    duration_ms: int | None = None,
) -> Delivery:
    """The delivery's state once an attempt answered ``status_code`` (None: no answer);
    ``delays_s`` is the retry schedule (the default, or the operator's)."""
    attempts = delivery.attempts + 1
    if status_code is not None and 200 <= status_code < 300:
        status, next_ms = DeliveryStatus.SUCCEEDED, None
    elif should_retry(status_code) and attempts <= len(delays_s):
        status, next_ms = DeliveryStatus.PENDING, now_ms + round(delays_s[attempts - 1] * 1000)
    else:
        status, next_ms = DeliveryStatus.FAILED, None
    return msgspec.structs.replace(
        delivery,
        status=status,
        attempts=attempts,
        next_attempt_ms=next_ms,
        last_status_code=status_code,
        last_error=error[:500],
        last_attempt_ms=now_ms,
        last_duration_ms=duration_ms,
    )


def delivery_json(delivery: Delivery, iso: IsoTime) -> dict[str, Any]:
    return {
        "id": delivery.id,
        "webhook_id": delivery.webhook_id,
        "activity_id": delivery.activity_id,
        "status": delivery.status.value,
        "attempts": delivery.attempts,
        "next_attempt_at": iso(delivery.next_attempt_ms) if delivery.next_attempt_ms else None,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "last_attempt_at": iso(delivery.last_attempt_ms) if delivery.last_attempt_ms else None,
        "last_duration_ms": delivery.last_duration_ms,
        "event": delivery.event,
        "created_at": iso(delivery.created_at_ms),
    }


def parse_retry_delays(raw: str) -> tuple[float, ...]:
    """``"10,60,300"`` -> (10.0, 60.0, 300.0): seconds before each retry, as configured.
    ValueError when a part is not a number >= 0 or there are more than 20."""
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    delays = tuple(float(p) for p in parts)
    if len(delays) > 20 or any(not 0 <= d <= 7 * 86_400 for d in delays):
        raise ValueError("retry delays must be at most 20 numbers of seconds, 0 to a week")
    return delays
