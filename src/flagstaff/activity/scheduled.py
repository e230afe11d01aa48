"""Scheduled flag changes: turn a flag on or off, or change its rollout, at a given time.

Pure: a scheduled change is validated when it is created, and when it is due it becomes an
ordinary update body (:func:`update_body`) that goes through the same validation, version
check and activity record as any PATCH (with a ``scheduled_change`` trigger).
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable
from typing import Any

import msgspec

from flagstaff.activity.records import Trigger


class Operation(enum.StrEnum):
    UPDATE_STATUS = "update_status"  # payload {"active": bool}
    UPDATE_ROLLOUT = "update_rollout"  # payload {"rollout_percentage": 0-100, "group": index?}
    PATCH = "patch"  # payload: any management API PATCH body


class ScheduledChange(msgspec.Struct, frozen=True):
    id: int
    project_id: int
    flag_id: int
    operation: Operation
    payload: dict[str, Any]
    run_at_ms: int
    created_by: int | None
    created_at_ms: int
    executed_at_ms: int | None = None
    failure: str | None = None


class ScheduleError(ValueError):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def check_schedule(operation: Any, payload: Any, run_at_ms: Any, now_ms: int) -> Operation:
    """The operation, once ``payload`` and ``run_at_ms`` are acceptable; else ScheduleError."""
    try:
        op = Operation(operation)
    except ValueError:
        allowed = ", ".join(o.value for o in Operation)
        raise ScheduleError(f"operation must be one of {allowed}", "operation") from None
    if not isinstance(run_at_ms, int) or isinstance(run_at_ms, bool):
        raise ScheduleError("scheduled_at must be a time", "scheduled_at")
    if run_at_ms <= now_ms:
        raise ScheduleError("scheduled_at must be in the future", "scheduled_at")
    if not isinstance(payload, dict):
        raise ScheduleError("payload must be an object", "payload")
    if op is Operation.UPDATE_STATUS and not isinstance(payload.get("active"), bool):
        raise ScheduleError("payload.active must be true or false", "payload.active")
    if op is Operation.UPDATE_ROLLOUT:
        rollout = payload.get("rollout_percentage")
        if not isinstance(rollout, int | float) or isinstance(rollout, bool):
            raise ScheduleError("payload.rollout_percentage must be a number", "payload")
        if not 0 <= rollout <= 100:
            raise ScheduleError("payload.rollout_percentage must be 0-100", "payload")
        group = payload.get("group", None)
        if group is not None and (
            not isinstance(group, int) or isinstance(group, bool) or group < 0
        ):
            raise ScheduleError("payload.group must be a condition set index", "payload.group")
    if op is Operation.PATCH and not payload:
        raise ScheduleError("payload must not be empty", "payload")
    return op


def due(changes: Iterable[ScheduledChange], now_ms: int) -> list[ScheduledChange]:
    """Changes to run now, oldest first (so two changes to one flag apply in order)."""
    pending = [c for c in changes if c.executed_at_ms is None and c.run_at_ms <= now_ms]
    return sorted(pending, key=lambda c: (c.run_at_ms, c.id))


def update_body(change: ScheduledChange, current: dict[str, Any]) -> dict[str, Any]:
    """The PATCH body that carries out ``change`` on the flag ``current``.

    ``update_rollout`` sets the rollout of one condition set (``group``, default: every set).
    Raises ScheduleError when the flag no longer has that condition set.
    """
    if change.operation is Operation.UPDATE_STATUS:
        body: dict[str, Any] = {"active": change.payload["active"]}
    elif change.operation is Operation.UPDATE_ROLLOUT:
        filters = copy.deepcopy(current.get("filters") or {})
        groups = filters.get("groups") or []
        index = change.payload.get("group")
        if index is not None and index >= len(groups):
            raise ScheduleError(f"the flag has no condition set {index + 1} any more", "group")
        targets = range(len(groups)) if index is None else (index,)
        for i in targets:
            groups[i]["rollout_percentage"] = change.payload["rollout_percentage"]
        body = {"filters": filters}
    else:
        body = dict(change.payload)
    body["version"] = current.get("version")
    return body


def trigger_for(change: ScheduledChange) -> Trigger:
    return Trigger(
        job_type="scheduled_change",
        job_id=str(change.id),
        payload={"operation": change.operation.value, **change.payload},
    )
