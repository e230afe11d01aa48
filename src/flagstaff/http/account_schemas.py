"""OpenAPI bodies of the keys, activity and rollback routes (see :mod:`flagstaff.http.schemas`)."""

from __future__ import annotations

from typing import Any

import msgspec


class PersonalApiKey(msgspec.Struct):
    id: int
    label: str
    mask_value: str
    prefix: str
    user_id: int | None
    created_at: str
    last_used_at: str | None
    revoked: bool
    revoked_at: str | None


class CreatedPersonalApiKey(PersonalApiKey):
    value: str
    """The key itself: shown in this answer only."""


class ActivityUser(msgspec.Struct):
    id: int
    first_name: str
    last_name: str
    email: str
    is_email_verified: bool | None


class ActivityChange(msgspec.Struct):
    type: str
    action: str
    field: str | None
    before: Any
    after: Any


class ActivityDetail(msgspec.Struct):
    changes: list[ActivityChange] | None
    trigger: dict[str, Any] | None
    name: str | None
    short_id: str | None


class ActivityEntry(msgspec.Struct):
    id: str
    user: ActivityUser | None
    unread: bool
    organization_id: str | None
    was_impersonated: bool
    is_system: bool
    activity: str
    item_id: str | None
    scope: str
    detail: ActivityDetail
    created_at: str


class ActivityPage(msgspec.Struct):
    results: list[ActivityEntry]
    next: str | None
    previous: str | None


class FlagActivityPage(ActivityPage):
    total_count: int


class ScheduledChange(msgspec.Struct):
    id: int
    record_id: str
    model_name: str
    payload: dict[str, Any]
    scheduled_at: str
    executed_at: str | None
    failure_reason: str | None
    created_at: str
    created_by: dict[str, Any] | None


class ScheduledChangePage(msgspec.Struct):
    count: int
    next: str | None
    previous: str | None
    results: list[ScheduledChange]
