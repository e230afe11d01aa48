"""Guardrails: metrics that must not get worse, and what a breach is.

A guardrail metric is judged by a confidence sequence at the experiment's alpha (results
stay valid however often they are read, so a daily check cannot cry wolf more often than
alpha). A variant breaches it when the whole interval of its relative effect lies on the bad
side of zero: below for ``goal: increase``, above for ``goal: decrease``. A metric that is
merely not significant never breaches.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["GuardrailBreach", "GuardrailState", "breach_reason", "guardrail_state"]

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
