"""CUPED: the relative effect adjusted by each person's pre-exposure value of the metric.

Each person's metric value ``y`` is replaced by ``y - θ x``, ``x`` the same metric over the
days before the person's first exposure (a funnel's ``x`` is 0 or 1: the last step done in
that window). The method is gbstats 0.8.0's (``RegressionAdjustedStatistic``):

- ``θ = cov(y, x) / var(x)``, pooled over the two groups compared (control and the variant),
  from the summed statistics of both; with no variance in ``x`` or ``y``, ``θ = 0`` and the
  result is the unadjusted one;
- each group's adjusted mean ``ȳ - θ x̄`` and variance ``var(y) + θ² var(x) - 2 θ cov(y, x)``;
- the relative effect ``(adjusted mean_t - adjusted mean_c) / ȳ_c`` with the delta-method
  variance over the adjusted variances and the unadjusted means.

The variance reduction reported is ``1 - var(adjusted effect) / var(unadjusted effect)``.
"""

from __future__ import annotations

import msgspec

from flagstaff.experiments.stats import (
    MeanStatistic,
    ProportionStatistic,
    RelativeEffect,
    StatisticError,
    relative_effect,
)

__all__ = ["AdjustedEffect", "CupedStatistic", "cuped_effect", "pooled_theta"]

Base = MeanStatistic | ProportionStatistic


class CupedStatistic(msgspec.Struct, frozen=True):
    """A group's metric (``post``), its pre-exposure covariate (``pre``, a proportion for
    funnels) and the sum over persons of their product."""

    post: Base
    pre: Base
    post_pre_sum_of_products: float

    @property
    def n(self) -> int:
        return self.post.n

    def covariance(self) -> float:
        n = self.n
        if n < 2:
            return 0.0
        return (self.post_pre_sum_of_products - self.post.sum * self.pre.sum / n) / (n - 1)

    def adjusted_mean(self, theta: float) -> float:
        return self.post.mean - theta * self.pre.mean

    def adjusted_variance(self, theta: float) -> float:
        if self.n < 2:
            return 0.0
        return (
            self.post.variance + theta * theta * self.pre.variance - 2 * theta * self.covariance()
        )


class AdjustedEffect(msgspec.Struct, frozen=True):
    relative: RelativeEffect
    theta: float
    variance_reduction: float
    """``1 - var(adjusted effect) / var(unadjusted effect)`` (0 when θ is 0)."""


def _joint(a: Base, b: Base) -> Base:
    n = a.n + b.n
    if isinstance(a, ProportionStatistic) and isinstance(b, ProportionStatistic):
        return ProportionStatistic(n, a.sum + b.sum)
    if isinstance(a, MeanStatistic) and isinstance(b, MeanStatistic):
        return MeanStatistic(n, a.sum + b.sum, a.sum_squares + b.sum_squares)
    raise StatisticError("Treatment and control statistics must be the same kind.")


def pooled_theta(control: CupedStatistic, treatment: CupedStatistic) -> float:
    """θ of both groups together (0 when the pooled pre or post values do not vary)."""
    post = _joint(control.post, treatment.post)
    pre = _joint(control.pre, treatment.pre)
    if pre.variance == 0 or post.variance == 0:
        return 0.0
    joint = CupedStatistic(
        post, pre, control.post_pre_sum_of_products + treatment.post_pre_sum_of_products
    )
    return joint.covariance() / pre.variance


def cuped_effect(treatment: CupedStatistic, control: CupedStatistic) -> AdjustedEffect:
    """The CUPED-adjusted relative effect of ``treatment`` against ``control``."""
    if type(treatment.post) is not type(control.post):
        raise StatisticError("Treatment and control statistics must be the same kind.")
    unadjusted = relative_effect(
        treatment.post.mean,
        treatment.post.variance,
        treatment.n,
        control.post.mean,
        control.post.variance,
        control.n,
    )
    theta = pooled_theta(control, treatment)
    if theta == 0:
        return AdjustedEffect(relative=unadjusted, theta=0.0, variance_reduction=0.0)
    treatment_variance = treatment.adjusted_variance(theta)
    control_variance = control.adjusted_variance(theta)
    if treatment_variance <= 0 or control_variance <= 0:
        raise StatisticError("The adjusted effect has no variance.")
    adjusted = relative_effect(
        treatment.post.mean,
        treatment_variance,
        treatment.n,
        control.post.mean,
        control_variance,
        control.n,
        adjusted_difference=treatment.adjusted_mean(theta) - control.adjusted_mean(theta),
    )
    return AdjustedEffect(
        relative=adjusted,
        theta=theta,
        variance_reduction=1 - adjusted.variance / unadjusted.variance,
    )
