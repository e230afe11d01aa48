"""Guardrails: metrics that must not get worse, and what a breach is.

A guardrail metric is judged by a confidence sequence at the experiment's alpha (results
stay valid however often they are read, so a daily check cannot cry wolf more often than
alpha). A variant breaches it when the whole interval of its relative effect lies on the bad
side of zero: below for ``goal: increase``, above for ``goal: decrease``. A metric that is
merely not significant never breaches.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from flagstaff.activity.records import (
    Activity,
    ActivityRecord,
    Actor,
    Detail,
    Scope,
    Trigger,
)

__all__ = [
    "GUARDRAIL_JOB",
    "GuardrailBreach",
    "GuardrailState",
    "breach_reason",
    "breach_record",
    "breach_trigger",
    "control_only_filters",
    "guardrail_state",
]

GUARDRAIL_JOB = "experiment_guardrail"
"""``detail.trigger.job_type`` of the flag change an auto-stop makes."""

GuardrailState = Literal["breached", "clear"]


class GuardrailBreach(msgspec.Struct, kw_only=True, frozen=True):
    """A variant significantly worse on a guardrail metric."""

    metric_uuid: str
    metric_name: str | None
    variant: str
    goal: Literal["increase", "decrease"]
    effect: float
    confidence_interval: tuple[float, float]
    p_value: float


def guardrail_state(
    goal: Literal["increase", "decrease"], interval: tuple[float, float]
) -> GuardrailState:
    """``breached`` when the interval excludes zero on the bad side of ``goal``."""
    low, high = interval
    worse = high < 0 if goal == "increase" else low > 0
    return "breached" if worse else "clear"


def breach_reason(breach: GuardrailBreach) -> str:
    """One sentence for the activity log and the console."""
    name = breach.metric_name or breach.metric_uuid
    low, high = breach.confidence_interval
    direction = "fell" if breach.goal == "increase" else "rose"
    return (
        f"Guardrail {name!r} {direction} for variant {breach.variant!r}: relative effect "
        f"{breach.effect:+.1%} (always-valid interval {low:+.1%} to {high:+.1%})."
    )


def breach_trigger(experiment_id: int, breach: GuardrailBreach) -> Trigger:
    return Trigger(
        job_type=GUARDRAIL_JOB,
        job_id=str(experiment_id),
        payload={"reason": breach_reason(breach), **msgspec.to_builtins(breach)},
    )


def breach_record(
    project_id: int,
    experiment_id: int,
    experiment_name: str,
    breach: GuardrailBreach,
    now_ms: int,
) -> ActivityRecord:
    """The activity record of a breach (its webhook event: ``experiment.guardrail_breached``):
    the metric, the variant and the interval in ``detail.trigger.payload``."""
    return ActivityRecord(
        project_id=project_id,
        scope=Scope.EXPERIMENT,
        item_id=str(experiment_id),
        activity=Activity.GUARDRAIL_BREACHED,
        actor=Actor(is_system=True),
        detail=Detail(name=experiment_name, trigger=breach_trigger(experiment_id, breach)),
        created_at_ms=now_ms,
    )


def control_only_filters(flag_filters: dict[str, Any], control_key: str) -> dict[str, Any]:
    """The experiment's flag's filters serving the control variant to every enrolled person
    (as a kill switch would end the test): the control at 100%, every other variant at 0%."""
    filters = dict(flag_filters)
    multivariate = dict(filters.get("multivariate") or {})
    multivariate["variants"] = [
        {**variant, "rollout_percentage": 100 if variant.get("key") == control_key else 0}
        for variant in multivariate.get("variants") or []
    ]
    filters["multivariate"] = multivariate
    return filters
