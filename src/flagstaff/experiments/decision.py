"""What to do now, in one sentence: ship a variant, keep running, or stop for harm.

From the results (pure): a guardrail breach says stop; otherwise a variant significantly better
on a primary metric and significantly worse on none is shipped (the largest effect on the
first primary metric where one is better); otherwise the experiment keeps running for the days
its primary metrics still need at the exposure rate so far, or, when they have their sample,
it is inconclusive. Significance is the results' own (adjusted for multiple testing and
sequential when those are on), so the advice is as trustworthy as they are.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

import msgspec

from flagstaff.experiments.guardrails import GuardrailBreach, breach_reason

if TYPE_CHECKING:
    from flagstaff.experiments.results import MetricResult, VariantResult

__all__ = ["Decision", "decide"]

DecisionKind = Literal["ship", "keep_running", "stop", "inconclusive"]


class Decision(msgspec.Struct, kw_only=True, frozen=True):
    kind: DecisionKind
    variant: str | None = None
    """The variant to ship, or the one that harms a guardrail."""
    days_remaining: float | None = None
    reason: str


def _better(metric: MetricResult, result: VariantResult) -> bool | None:
    """True significantly better, False significantly worse, None neither."""
    if not result.significant or result.effect is None:
        return None
    return result.effect > 0 if metric.goal == "increase" else result.effect < 0


def _name(metric: MetricResult) -> str:
    return metric.name or f"the {metric.metric_type} metric"


def decide(primary: list[MetricResult], breaches: list[GuardrailBreach]) -> Decision:
    """The decision from the primary metrics' results and the guardrail breaches."""
    if breaches:
        breach = breaches[0]
        return Decision(
            kind="stop", variant=breach.variant, reason=f"Stop: {breach_reason(breach)}"
        )
    if not primary:
        return Decision(
            kind="keep_running", reason="Keep running: add a primary metric to decide on."
        )
    worse: set[str] = set()
    wins: list[tuple[str, MetricResult, float]] = []
    for metric in primary:
        for result in metric.variant_results:
            verdict = _better(metric, result)
            if verdict is False:
                worse.add(result.key)
            elif verdict is True:
                wins.append((result.key, metric, float(result.effect or 0.0)))
    for key, metric, effect in sorted(wins, key=lambda w: (primary.index(w[1]), -abs(w[2]))):
        if key not in worse:
            return Decision(
                kind="ship",
                variant=key,
                reason=(
                    f"Ship {key}: it is significantly better on {_name(metric)} "
                    f"({effect:+.1%}), worse on no primary metric, and no guardrail is harmed."
                ),
            )
    remaining = [
        metric.sample_size.days_remaining
        for metric in primary
        if metric.sample_size is not None and metric.sample_size.days_remaining is not None
    ]
    sized = [m for m in primary if m.sample_size is not None and m.sample_size.per_variant]
    if remaining and max(remaining) == 0:
        return Decision(
            kind="inconclusive",
            days_remaining=0.0,
            reason=(
                "No winner: every primary metric has the sample to detect its minimum "
                "detectable effect, and no variant is significantly better."
            ),
        )
    days = max(remaining) if remaining else None
    if days is not None and sized:
        metric = sized[0]
        size = metric.sample_size
        assert size is not None
        return Decision(
            kind="keep_running",
            days_remaining=days,
            reason=(
                f"Keep running (about {math.ceil(days)} more days): no variant is "
                f"significantly better yet, and {_name(metric)} needs about "
                f"{size.per_variant:,} persons per variant to detect a "
                f"{size.minimum_detectable_effect:.0%} change."
            ),
        )
    return Decision(
        kind="keep_running",
        reason="Keep running: no variant is significantly better yet, and too few persons "
        "are exposed to say how long it will take.",
    )
