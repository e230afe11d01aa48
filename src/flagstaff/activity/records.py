"""Change records for the activity log, in the shape PostHog's activity log API serves.

PostHog's ``ActivityLog`` row: ``scope`` (a model name such as ``FeatureFlag``), ``item_id``
(as text), ``activity`` (``created``, ``updated``, ``deleted``...), ``user``, ``is_system``,
``created_at`` and ``detail`` = ``{"changes": [Change...] | null, "trigger": null,
"name": <item name>, "short_id": null}``; each Change is ``{"type": scope, "action":
"created" | "changed" | "deleted", "field", "before", "after"}``.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec


class Scope(enum.StrEnum):
    FEATURE_FLAG = "FeatureFlag"
    COHORT = "Cohort"
    PERSONAL_API_KEY = "PersonalAPIKey"
    WEBHOOK = "Webhook"
    MEMBERSHIP = "Membership"
    PROJECT = "Project"
    CHANGE_REQUEST = "ChangeRequest"
    EXPERIMENT = "Experiment"
    USER = "User"  # single sign-on: logins, refusals, sessions ended by an admin


class Activity(enum.StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"
    ROLLED_BACK = "rolled_back"  # an update that restores an earlier version
    REVOKED = "revoked"
    GUARDRAIL_BREACHED = "guardrail_breached"  # an experiment's guardrail metric got worse
    LOGGED_IN = "logged_in"
    LOGIN_REFUSED = "login_refused"
    SESSIONS_ENDED = "sessions_ended"


class ChangeAction(enum.StrEnum):
    CREATED = "created"
    CHANGED = "changed"
    DELETED = "deleted"


class Change(msgspec.Struct, frozen=True, omit_defaults=False):
    type: str
    action: ChangeAction
    field: str | None = None
    before: Any = None
    after: Any = None


class Trigger(msgspec.Struct, frozen=True):
    """Set when the change was made by the system for a reason (a scheduled change, an
    approved request, a rollback)."""

    job_type: str
    job_id: str
    payload: dict[str, Any] = {}


class Detail(msgspec.Struct, frozen=True):
    changes: list[Change] | None = None
    trigger: Trigger | None = None
    name: str | None = None
    short_id: str | None = None


class Actor(msgspec.Struct, frozen=True):
    """Who made a change: a user, or the system (``user_id`` None, ``is_system`` True)."""

    user_id: int | None = None
    email: str = ""
    first_name: str = ""
    is_system: bool = False


SYSTEM = Actor(is_system=True)


class ChangeSource(msgspec.Struct, frozen=True):
    """Who made a store write and why. The store writes the activity record it implies in the
    same transaction as the change (``activity`` overrides the one read from the change)."""

    actor: Actor = SYSTEM
    trigger: Trigger | None = None
    activity: Activity | None = None


class ActivityRecord(msgspec.Struct, frozen=True):
    """One row of the activity log as it is written (id and uuid are given by the store)."""

    project_id: int
    scope: Scope
    item_id: str | None
    activity: Activity
    actor: Actor
    detail: Detail
    created_at_ms: int


class StoredActivity(msgspec.Struct, frozen=True):
    id: int
    uuid: str
    record: ActivityRecord
