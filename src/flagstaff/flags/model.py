"""Request and result types of the flag engine, and the reason codes it reports."""

from __future__ import annotations

from typing import Any

import msgspec

SUPER_CONDITION_VALUE = "super_condition_value"
HOLDOUT_CONDITION_VALUE = "holdout_condition_value"
CONDITION_MATCH = "condition_match"
OUT_OF_ROLLOUT_BOUND = "out_of_rollout_bound"
NO_CONDITION_MATCH = "no_condition_match"
NO_GROUP_TYPE = "no_group_type"
FLAG_DISABLED = "flag_disabled"
MISSING_DEPENDENCY = "missing_dependency"
EVALUATION_ERROR = "evaluation_error"

DESCRIPTIONS: dict[str, str] = {
    SUPER_CONDITION_VALUE: "Super condition value",
    HOLDOUT_CONDITION_VALUE: "Holdout condition value",
    OUT_OF_ROLLOUT_BOUND: "Out of rollout bound",
    NO_CONDITION_MATCH: "No matching condition set",
    NO_GROUP_TYPE: "No group type",
    FLAG_DISABLED: "Feature flag is disabled",
    MISSING_DEPENDENCY: "Flag cannot be evaluated due to missing dependency",
}
GROUPS_NOT_EVALUATED_DESCRIPTION = (
    "No matching condition set (group conditions were not evaluated because no group type "
    "was provided)"
)


def describe(code: str, condition_index: int | None) -> str:
    if code == CONDITION_MATCH:
        return f"Matched condition set {(condition_index or 0) + 1}"
    return DESCRIPTIONS.get(code, "Flag could not be evaluated")


class EvalRequest(msgspec.Struct, kw_only=True):
    """Everything one evaluation needs; person/group properties are final (overrides applied)."""

    distinct_id: str
    person_properties: dict[str, Any] = {}
    groups: dict[str, str] = {}
    group_properties: dict[str, dict[str, Any]] = {}
    device_id: str | None = None
    hash_key_overrides: dict[str, str] = {}
    static_cohort_ids: frozenset[int] = frozenset()
    flag_keys: list[str] | None = None
    runtime: str | None = None
    contexts: list[str] | None = None


class FlagResult(msgspec.Struct, kw_only=True):
    key: str
    enabled: bool
    variant: str | None
    reason_code: str
    condition_index: int | None
    reason_description: str
    payload: str | None
    id: int
    version: int
    description: str | None
    failed: bool = False
