"""Activity records as PostHog's activity log API serves them
(``/api/projects/@current/activity_log/`` and ``.../feature_flags/<id>/activity/``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from flagstaff.activity.records import StoredActivity

IsoTime = Callable[[int], str]


def user_json(record: StoredActivity) -> dict[str, Any] | None:
    actor = record.record.actor
    if actor.user_id is None:
        return None
    return {
        "id": actor.user_id,
        "first_name": actor.first_name,
        "last_name": "",
        "email": actor.email,
        "is_email_verified": None,
    }


def activity_json(stored: StoredActivity, iso: IsoTime) -> dict[str, Any]:
    record = stored.record
    return {
        "id": stored.uuid,
        "user": user_json(stored),
        "unread": False,
        "organization_id": None,
        "was_impersonated": False,
        "is_system": record.actor.is_system,
        "activity": record.activity.value,
        "item_id": record.item_id,
        "scope": record.scope.value,
        "detail": msgspec.to_builtins(record.detail),
        "created_at": iso(record.created_at_ms),
    }


def activity_page(
    rows: list[StoredActivity],
    iso: IsoTime,
    next_url: str | None,
    previous_url: str | None,
    total_count: int | None = None,
) -> dict[str, Any]:
    """PostHog's envelopes: ``/activity_log/`` is cursor paginated (100 a page, newest first:
    no ``total_count``); ``/feature_flags/<id>/activity/`` is paged by ``limit`` (default 10)
    and ``page`` (from 1) and carries ``total_count``."""
    page: dict[str, Any] = {
        "results": [activity_json(r, iso) for r in rows],
        "next": next_url,
        "previous": previous_url,
    }
    if total_count is not None:
        page["total_count"] = total_count
    return page
