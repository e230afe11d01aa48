"""Experiment statistics: a variant against the baseline, Bayesian or frequentist.

The methods are PostHog's (``products/experiments/stats``), which follow GrowthBook's:

- The effect is relative, ``(mean_t - mean_c) / mean_c``. Its variance comes from the delta
  method: ``var_t / (n_t mean_c²) + mean_t² var_c / (n_c mean_c⁴)`` (the groups are
  independent). Per-group variances: ``(sum_squares - sum²/n) / (n - 1)`` for means,
  ``p (1 - p)`` for proportions (funnels), and for ratios ``M/D`` the delta method over the
  per-person numerator and denominator with their covariance.
- Bayesian: a flat prior, so the posterior of the effect is normal around the observed effect
  with the variance above. ``chance_to_win`` is P(effect > 0) (P(effect < 0) when lower is
  better), the credible interval is the posterior's central 95%, and a result is significant
  when the chance to win is above 95% or below 5%.
- Frequentist: Welch's t-test with Welch-Satterthwaite degrees of freedom (used for
  proportions too, as PostHog and GrowthBook do; at experiment sizes t and z agree), a
  two-sided p-value, the 95% confidence interval of the relative effect, significant when
  ``p < 0.05``.
- Sample ratio mismatch: Pearson's chi-square of the exposure counts against the configured
  split; a mismatch when ``p < 0.001`` (PostHog's threshold).

scipy.special provides the distribution functions (normal, Student's t, chi-square); the
moment formulas are the definitions above. Importing only ``scipy.special`` costs about a
third of the CPU of ``scipy.stats`` (``docs/benchmarks.md``), and that import is what a
worker's first results request waits for.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec
from scipy import special

from flagstaff.experiments.model import DEFAULT_ALPHA

__all__ = [
    "BASELINE_MEAN_IS_ZERO",
    "MIN_EXPOSURES",
    "MIN_FUNNEL_CONVERSIONS",
    "NOT_ENOUGH_EXPOSURES",
    "NOT_ENOUGH_METRIC_DATA",
    "SRM_P_VALUE",
    "BayesianComparison",
    "FrequentistComparison",
    "MeanStatistic",
    "ProportionStatistic",
    "RatioStatistic",
    "RelativeEffect",
    "SampleRatioMismatch",
    "Statistic",
    "StatisticError",
    "bayesian",
    "bayesian_checks",
    "bayesian_effect",
    "frequentist",
    "relative_effect",
    "sample_ratio_mismatch",
    "t_test",
    "validation_failures",
]

ALPHA = DEFAULT_ALPHA
CI_LEVEL = 1 - ALPHA
MIN_EXPOSURES = 50
"""PostHog: fewer exposed persons in a variant than this is ``not-enough-exposures``."""
MIN_FUNNEL_CONVERSIONS = 5
"""PostHog: fewer conversions in a funnel variant than this is ``not-enough-metric-data``."""
SRM_P_VALUE = 0.001
NOT_ENOUGH_EXPOSURES = "not-enough-exposures"
NOT_ENOUGH_METRIC_DATA = "not-enough-metric-data"
BASELINE_MEAN_IS_ZERO = "baseline-mean-is-zero"


class StatisticError(ValueError):
    """The statistics cannot be computed from these numbers (the message says why)."""


class MeanStatistic(msgspec.Struct, frozen=True):
    """A per-person value: count, sum and sum of squares over the variant's persons."""

    n: int
    sum: float
    sum_squares: float

    @property
    def mean(self) -> float:
        return self.sum / self.n

    @property
    def variance(self) -> float:
        if self.n < 2:
            return 0.0
        return max(self.sum_squares - self.sum * self.sum / self.n, 0.0) / (self.n - 1)


class ProportionStatistic(msgspec.Struct, frozen=True):
    """A conversion: persons and how many converted."""

    n: int
    sum: float

    @property
    def mean(self) -> float:
        return self.sum / self.n

    @property
    def variance(self) -> float:
        p = self.mean
        return p * (1 - p)


class RatioStatistic(msgspec.Struct, frozen=True):
    """Sum of a numerator over sum of a denominator, per-person values of both known."""

    n: int
    numerator: MeanStatistic
    denominator: MeanStatistic
    sum_of_products: float

    @property
    def mean(self) -> float:
        if self.denominator.sum == 0:
            raise StatisticError("The ratio's denominator is zero.")
        return self.numerator.sum / self.denominator.sum

    @property
    def covariance(self) -> float:
        if self.n < 2:
            return 0.0
        return (self.sum_of_products - self.numerator.sum * self.denominator.sum / self.n) / (
            self.n - 1
        )

    @property
    def variance(self) -> float:
        m, d = self.numerator.mean, self.denominator.mean
        return (
            self.numerator.variance / d**2
            + m**2 * self.denominator.variance / d**4
            - 2 * m * self.covariance / d**3
        )


Statistic = MeanStatistic | ProportionStatistic | RatioStatistic


class BayesianComparison(msgspec.Struct, frozen=True):
    effect: float
    """Posterior mean of the relative effect."""
    chance_to_win: float
    credible_interval: tuple[float, float]
    significant: bool
    method: Literal["bayesian"] = "bayesian"


class FrequentistComparison(msgspec.Struct, frozen=True):
    effect: float
    """Observed relative effect."""
    p_value: float
    confidence_interval: tuple[float, float]
    significant: bool
    degrees_of_freedom: float | None
    """None for a confidence sequence (it has none)."""
    method: Literal["frequentist"] = "frequentist"


class SampleRatioMismatch(msgspec.Struct, frozen=True):
    chi_square: float
    p_value: float
    mismatch: bool
    expected: dict[str, float]
    """Expected persons per variant under the configured split."""
    observed: dict[str, int]


class RelativeEffect(msgspec.Struct, frozen=True):
    """A relative effect ready for a test: the estimate, its delta-method variance, Welch's
    degrees of freedom, and the persons of both groups (what a confidence sequence needs)."""

    effect: float
    variance: float
    degrees_of_freedom: float
    persons: int


def relative_effect(
    treatment_mean: float,
    treatment_variance: float,
    treatment_n: int,
    control_mean: float,
    control_variance: float,
    control_n: int,
    *,
    adjusted_difference: float | None = None,
) -> RelativeEffect:
    """The relative effect from each group's (unadjusted) mean, variance and size.

    ``adjusted_difference`` replaces ``treatment_mean - control_mean`` in the estimate (CUPED's
    adjusted means; the denominator stays the control's unadjusted mean, as in gbstats).
    """
    if treatment_n < 2 or control_n < 2:
        raise StatisticError("Each variant needs at least two persons.")
    if control_mean == 0:
        raise StatisticError("The baseline mean is zero: a relative effect is undefined.")
    difference = (
        treatment_mean - control_mean if adjusted_difference is None else adjusted_difference
    )
    effect = difference / control_mean
    per_treatment = treatment_variance / treatment_n
    per_control = control_variance / control_n
    variance = per_treatment / control_mean**2 + treatment_mean**2 * per_control / control_mean**4
    if not variance > 0 or not math.isfinite(variance):
        raise StatisticError("The effect has no variance: every person has the same value.")
    dof = (per_treatment + per_control) ** 2 / (
        per_treatment**2 / (treatment_n - 1) + per_control**2 / (control_n - 1)
    )
    return RelativeEffect(effect, variance, float(dof), treatment_n + control_n)


def _relative(treatment: Statistic, control: Statistic) -> RelativeEffect:
    if type(treatment) is not type(control):
        raise StatisticError("Treatment and control statistics must be the same kind.")
    if treatment.n < 2 or control.n < 2:
        raise StatisticError("Each variant needs at least two persons.")
    return relative_effect(
        treatment.mean, treatment.variance, treatment.n, control.mean, control.variance, control.n
    )


def bayesian(
    treatment: Statistic, control: Statistic, *, lower_is_better: bool = False
) -> BayesianComparison:
    """Chance to win and 95% credible interval of the relative effect (flat prior)."""
    relative = _relative(treatment, control)
    bayesian_checks(treatment, control)
    return bayesian_effect(relative, lower_is_better=lower_is_better)


def bayesian_checks(treatment: Statistic, control: Statistic) -> None:
    """PostHog's conditions of the Bayesian normal approximation (raises when unmet)."""
    if control.mean < 0:
        raise StatisticError("The baseline mean must be positive for a relative effect.")
    if isinstance(control, ProportionStatistic) and isinstance(treatment, ProportionStatistic):
        for name, stat in (("treatment", treatment), ("baseline", control)):
            if stat.sum < MIN_FUNNEL_CONVERSIONS or stat.n - stat.sum < MIN_FUNNEL_CONVERSIONS:
                raise StatisticError(
                    f"The normal approximation needs at least {MIN_FUNNEL_CONVERSIONS} "
                    f"conversions and non-conversions in the {name}."
                )


def bayesian_effect(
    relative: RelativeEffect, *, lower_is_better: bool = False
) -> BayesianComparison:
    """The flat-prior posterior of a relative effect: normal around it, its variance."""
    effect = relative.effect
    scale = math.sqrt(relative.variance)
    # the posterior of the effect is normal(effect, scale): P(effect < 0) or P(effect > 0)
    chance = float(special.ndtr(-effect / scale if lower_is_better else effect / scale))
    margin = float(special.ndtri(1 - ALPHA / 2)) * scale
    return BayesianComparison(
        effect=effect,
        chance_to_win=chance,
        credible_interval=(effect - margin, effect + margin),
        significant=chance > CI_LEVEL or chance < 1 - CI_LEVEL,
    )


def frequentist(
    treatment: Statistic, control: Statistic, *, alpha: float = ALPHA
) -> FrequentistComparison:
    """Welch's two-sided t-test on the relative effect, with its ``1 - alpha`` interval."""
    return t_test(_relative(treatment, control), alpha=alpha)


def t_test(relative: RelativeEffect, *, alpha: float = ALPHA) -> FrequentistComparison:
    """The fixed-horizon test of a relative effect (gbstats' ``TwoSidedTTest``)."""
    effect, dof = relative.effect, relative.degrees_of_freedom
    error = math.sqrt(relative.variance)
    p_value = float(2 * special.stdtr(dof, -abs(effect) / error))  # two-sided: 2 * sf(|t|)
    margin = float(special.stdtrit(dof, 1 - alpha / 2)) * error
    return FrequentistComparison(
        effect=effect,
        p_value=p_value,
        confidence_interval=(effect - margin, effect + margin),
        significant=p_value < alpha,
        degrees_of_freedom=float(dof),
    )


def sample_ratio_mismatch(
    observed: dict[str, int], split: dict[str, float]
) -> SampleRatioMismatch | None:
    """Chi-square test of exposure counts against the split (percentages or weights).

    None when it cannot be run: fewer than two variants with weight, or nobody exposed.
    """
    keys = [key for key, weight in split.items() if weight > 0]
    total = sum(observed.get(key, 0) for key in keys)
    if len(keys) < 2 or total == 0:
        return None
    weight_sum = sum(split[key] for key in keys)
    expected = [total * split[key] / weight_sum for key in keys]
    counts = [observed.get(key, 0) for key in keys]
    chi_square = sum((o - e) ** 2 / e for o, e in zip(counts, expected, strict=True))
    p_value = float(special.chdtrc(len(keys) - 1, chi_square))  # the survival function
    return SampleRatioMismatch(
        chi_square=float(chi_square),
        p_value=float(p_value),
        mismatch=bool(p_value < SRM_P_VALUE),
        expected=dict(zip(keys, expected, strict=True)),
        observed=dict(zip(keys, counts, strict=True)),
    )


def validation_failures(
    number_of_samples: int, total: float, *, funnel: bool, baseline: bool
) -> list[str]:
    """PostHog's reasons not to compute statistics for a variant (empty: go ahead)."""
    failures = []
    if number_of_samples < MIN_EXPOSURES:
        failures.append(NOT_ENOUGH_EXPOSURES)
    if funnel and total < MIN_FUNNEL_CONVERSIONS:
        failures.append(NOT_ENOUGH_METRIC_DATA)
    if baseline and total == 0:
        failures.append(BASELINE_MEAN_IS_ZERO)
    return failures
