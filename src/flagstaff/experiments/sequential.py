"""Always-valid inference: asymptotic confidence sequences on the relative effect.

The method is Waudby-Smith et al. (2023), "Time-uniform central limit theory and asymptotic
confidence sequences" (arXiv 2103.06476), as GrowthBook's gbstats 0.8.0 implements it
(``SequentialTwoSidedTTest``). With ``N`` the persons of both groups, ``s² = N · var(effect)``
and ``rho² = (-2 ln alpha + ln(1 - 2 ln alpha)) / eta`` (eq. 161; ``eta`` the tuning
parameter, the sample size at which the sequence is tightest):

- interval: ``effect ± s · sqrt(2 (N rho² + 1) ln(sqrt(N rho² + 1) / alpha) / (N rho)²)`` (eq. 9);
- p-value: ``min(1, 1 / e)`` with the e-value
  ``e = exp(rho² N effect² / var / (2 (N rho² + 1))) / sqrt(N rho² + 1)`` (eq. 155).

Both hold at every look: reading the results daily and stopping when ``p < alpha`` keeps the
false-positive rate at most ``alpha`` (``docs/experiments.md`` has the simulation).
"""

from __future__ import annotations

import math

from flagstaff.experiments.model import DEFAULT_TUNING_PARAMETER
from flagstaff.experiments.stats import ALPHA, FrequentistComparison, RelativeEffect

__all__ = ["half_width_factor", "sequential_test"]


def _rho_squared(alpha: float, tuning: float) -> float:
    log_alpha = math.log(alpha)
    return (-2 * log_alpha + math.log(-2 * log_alpha + 1)) / tuning


def half_width_factor(persons: int, *, alpha: float = ALPHA, tuning: float) -> float:
    """The interval's half-width over the effect's standard error at ``persons`` (the
    fixed-horizon test's factor is about 1.96 at alpha 0.05)."""
    rho2 = _rho_squared(alpha, tuning)
    scaled = persons * rho2 + 1
    return math.sqrt(persons) * math.sqrt(
        2 * scaled * math.log(math.sqrt(scaled) / alpha) / (persons * persons * rho2)
    )


def sequential_test(
    relative: RelativeEffect,
    *,
    alpha: float = ALPHA,
    tuning: float = DEFAULT_TUNING_PARAMETER,
) -> FrequentistComparison:
    """The confidence sequence and always-valid p-value of a relative effect."""
    effect, variance, persons = relative.effect, relative.variance, relative.persons
    margin = math.sqrt(variance) * half_width_factor(persons, alpha=alpha, tuning=tuning)
    rho2 = _rho_squared(alpha, tuning)
    scaled = persons * rho2 + 1
    exponent = rho2 * effect * effect * persons / variance / (2 * scaled)
    # 1/e = exp(-exponent) * sqrt(scaled): in logs, so a huge e-value cannot overflow
    log_inverse_e = -exponent + 0.5 * math.log(scaled)
    p_value = 1.0 if log_inverse_e >= 0 else math.exp(log_inverse_e)
    return FrequentistComparison(
        effect=effect,
        p_value=p_value,
        confidence_interval=(effect - margin, effect + margin),
        significant=p_value < alpha,
        degrees_of_freedom=None,
    )
