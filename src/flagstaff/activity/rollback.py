"""Rollback plans: given a flag's version history, the update that restores version N.

The store keeps the full body of every version (``feature_flag_versions``). A rollback is an
ordinary update through the same validation and the same optimistic version check as any
PATCH, so a flag changed meanwhile is refused rather than overwritten.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.activity.diff import changes_between
from flagstaff.activity.records import Change, Scope, Trigger

# What a flag body restores: the fields the management API lets a user write.
FLAG_WRITABLE_FIELDS = (
    "key",
    "name",
    "filters",
    "active",
    "deleted",
    "ensure_experience_continuity",
    "evaluation_runtime",
    "evaluation_contexts",
    "bucketing_identifier",
    "tags",
)


class FlagVersion(msgspec.Struct, frozen=True):
    version: int
    data: dict[str, Any]
    created_at_ms: int
    user_id: int | None = None
    activity_id: int | None = None  # the activity record of the change that made it


class RollbackPlan(msgspec.Struct, frozen=True):
    flag_id: int
    target_version: int
    base_version: int  # the current version: the update must still find it
    body: dict[str, Any]  # a PATCH body (with "version" for the optimistic check)
    changes: list[Change]  # what the rollback changes, current -> restored
    trigger: Trigger


class RollbackError(ValueError):
    """Why the rollback cannot be planned (answered as 400 with this message)."""

    def __init__(self, message: str, field: str = "version") -> None:
        super().__init__(message)
        self.field = field


def restorable(data: dict[str, Any]) -> dict[str, Any]:
    return {name: data[name] for name in FLAG_WRITABLE_FIELDS if name in data}


def plan_rollback(
    flag_id: int, history: list[FlagVersion], current: dict[str, Any], target_version: int
) -> RollbackPlan:
    """The update restoring ``target_version`` of the flag whose current body is ``current``."""
    base = current.get("version")
    if not isinstance(base, int):
        raise RollbackError("the current flag has no version")
    if target_version == base:
        raise RollbackError(f"version {target_version} is the current version")
    target = next((v for v in history if v.version == target_version), None)
    if target is None:
        known = ", ".join(str(v.version) for v in sorted(history, key=lambda v: v.version))
        raise RollbackError(
            f"no version {target_version} in this flag's history (known: {known or 'none'})"
        )
    body = restorable(target.data)
    changes = changes_between(Scope.FEATURE_FLAG, restorable(current), body)
    if not changes:
        raise RollbackError(f"version {target_version} is identical to the current flag")
    return RollbackPlan(
        flag_id=flag_id,
        target_version=target_version,
        base_version=base,
        body={**body, "version": base},
        changes=changes,
        trigger=Trigger(
            job_type="rollback",
            job_id=str(flag_id),
            payload={"from_version": base, "to_version": target_version},
        ),
    )
