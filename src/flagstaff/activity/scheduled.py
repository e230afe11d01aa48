"""Scheduled flag changes, in PostHog's shape (``/api/projects/@current/scheduled_changes/``:
``record_id``, ``model_name: "FeatureFlag"``, ``payload: {"operation", "value"}``,
``scheduled_at``), plus one operation of ours, ``update_rollout``.

Pure: a scheduled change is checked when it is created, and when it is due it becomes an
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
from flagstaff.common.json_types import is_number

MODEL_NAME = "FeatureFlag"


class Operation(enum.StrEnum):
    UPDATE_STATUS = "update_status"  # value: true / false
    ADD_RELEASE_CONDITION = "add_release_condition"  # value: {groups, payloads?, multivariate?}
    UPDATE_VARIANTS = "update_variants"  # value: {variants, payloads?}
    UPDATE_ROLLOUT = "update_rollout"  # ours: value 0-100; payload "group": one set, else all


class ScheduledChange(msgspec.Struct, frozen=True):
    id: int
    project_id: int
    flag_id: int
    operation: Operation
    payload: dict[str, Any]  # {"operation": ..., "value": ..., "group"?: int}
    run_at_ms: int
    created_by: int | None
    created_at_ms: int
    executed_at_ms: int | None = None
    failure: str | None = None


class ScheduleError(ValueError):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def check_schedule(payload: Any, run_at_ms: Any, now_ms: int) -> Operation:
    """The payload's operation, once ``payload`` and ``run_at_ms`` are acceptable; else
    ScheduleError naming the field. (The flag rules judge the resulting body when it runs.)"""
    if not isinstance(payload, dict):
        raise ScheduleError("payload must be an object", "payload")
    operation: Any = payload.get("operation")
    try:
        op = Operation(operation)
    except ValueError:
        allowed = ", ".join(o.value for o in Operation)
        raise ScheduleError(f"payload.operation must be one of {allowed}", "payload") from None
    if not isinstance(run_at_ms, int) or isinstance(run_at_ms, bool):
        raise ScheduleError("scheduled_at must be a time", "scheduled_at")
    if run_at_ms <= now_ms:
        raise ScheduleError("scheduled_at must be in the future", "scheduled_at")
    value: Any = payload.get("value")
    if op is Operation.UPDATE_STATUS and not isinstance(value, bool):
        raise ScheduleError("payload.value must be true or false", "payload")
    if op is Operation.ADD_RELEASE_CONDITION and (
        not isinstance(value, dict) or not isinstance(value.get("groups"), list)
    ):
        raise ScheduleError("payload.value must be an object with a groups list", "payload")
    if op is Operation.UPDATE_VARIANTS and (
        not isinstance(value, dict) or not isinstance(value.get("variants"), list)
    ):
        raise ScheduleError("payload.value must be an object with a variants list", "payload")
    if op is Operation.UPDATE_ROLLOUT:
        if not is_number(value) or not 0 <= value <= 100:
            raise ScheduleError("payload.value must be a percentage, 0-100", "payload")
        group = payload.get("group")
        if group is not None and (
            not isinstance(group, int) or isinstance(group, bool) or group < 0
        ):
            raise ScheduleError("payload.group must be a condition set index", "payload")
    return op


def due(changes: Iterable[ScheduledChange], now_ms: int) -> list[ScheduledChange]:
    """Changes to run now, oldest first (so two changes to one flag apply in order)."""
    pending = [c for c in changes if c.executed_at_ms is None and c.run_at_ms <= now_ms]
    return sorted(pending, key=lambda c: (c.run_at_ms, c.id))


def update_body(change: ScheduledChange, current: dict[str, Any]) -> dict[str, Any]:
    """The PATCH body that carries out ``change`` on the flag ``current`` (not mutated).
    Raises ScheduleError when the flag no longer fits the change."""
    value: Any = change.payload.get("value")
    filters = copy.deepcopy(current.get("filters") or {})
    if change.operation is Operation.UPDATE_STATUS:
        return {"active": value, "version": current.get("version")}
    if change.operation is Operation.ADD_RELEASE_CONDITION:
        filters["groups"] = [*(filters.get("groups") or []), *copy.deepcopy(value["groups"])]
        if "payloads" in value:
            filters["payloads"] = {**(filters.get("payloads") or {}), **value["payloads"]}
        if "multivariate" in value:
            filters["multivariate"] = copy.deepcopy(value["multivariate"])
    elif change.operation is Operation.UPDATE_VARIANTS:
        filters["multivariate"] = {"variants": copy.deepcopy(value["variants"])}
        if "payloads" in value:
            filters["payloads"] = copy.deepcopy(value["payloads"])
    else:
        groups = filters.get("groups") or []
        index = change.payload.get("group")
        if index is not None and index >= len(groups):
            raise ScheduleError(f"the flag has no condition set {index + 1} any more", "group")
        for i in range(len(groups)) if index is None else (index,):
            groups[i]["rollout_percentage"] = value
    return {"filters": filters, "version": current.get("version")}


def trigger_for(change: ScheduledChange) -> Trigger:
    return Trigger(job_type="scheduled_change", job_id=str(change.id), payload=change.payload)
