"""Field-level diffs between two versions of an item, in PostHog's ``detail.changes`` shape,
and the activity records built from them."""

from __future__ import annotations

from typing import Any

from flagstaff.activity.records import (
    Activity,
    ActivityRecord,
    Actor,
    Change,
    ChangeAction,
    Detail,
    Scope,
    Trigger,
)

# Fields that change on every write or are not the user's to change: never listed as changes.
FIELD_EXCLUSIONS: dict[Scope, frozenset[str]] = {
    Scope.FEATURE_FLAG: frozenset(
        {"id", "created_at", "updated_at", "created_by", "version", "team_id", "project_id"}
    ),
    Scope.COHORT: frozenset(
        {"id", "created_at", "updated_at", "created_by", "version", "team_id", "project_id"}
    ),
}


def changes_between(
    scope: Scope, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> list[Change]:
    """Top-level field changes from ``before`` to ``after`` (either may be None), sorted by
    field name so that the log is stable. ``None`` values count as absent, as in PostHog."""
    before = before or {}
    after = after or {}
    excluded = FIELD_EXCLUSIONS.get(scope, frozenset())
    changes: list[Change] = []
    for field in sorted((before.keys() | after.keys()) - excluded):
        old, new = before.get(field), after.get(field)
        if old is None and new is not None:
            changes.append(Change(scope.value, ChangeAction.CREATED, field, None, new))
        elif new is None and old is not None:
            changes.append(Change(scope.value, ChangeAction.DELETED, field, old, None))
        elif old != new or type(old) is not type(new):
            changes.append(Change(scope.value, ChangeAction.CHANGED, field, old, new))
    return changes


def _activity_for(before: dict[str, Any] | None, after: dict[str, Any] | None) -> Activity:
    if before is None:
        return Activity.CREATED
    if after is None or (after.get("deleted") and not before.get("deleted")):
        return Activity.DELETED
    return Activity.UPDATED


def record_change(
    *,
    project_id: int,
    scope: Scope,
    item_id: int | str | None,
    actor: Actor,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    now_ms: int,
    activity: Activity | None = None,
    trigger: Trigger | None = None,
) -> ActivityRecord | None:
    """The activity record for a change, or None when nothing the user sees changed (an
    update with no field changes is not logged, as in PostHog).

    Created items carry a change per field (``action: created``), so that the log alone
    tells what the item was; PostHog leaves ``changes`` empty there.
    """
    changes = changes_between(scope, before, after)
    chosen = activity or _activity_for(before, after)
    if chosen is Activity.UPDATED and not changes:
        return None
    source = after if after is not None else before or {}
    name = source.get("key") if scope is Scope.FEATURE_FLAG else source.get("name")
    return ActivityRecord(
        project_id=project_id,
        scope=scope,
        item_id=None if item_id is None else str(item_id),
        activity=chosen,
        actor=actor,
        detail=Detail(changes=changes or None, trigger=trigger, name=name),
        created_at_ms=now_ms,
    )
