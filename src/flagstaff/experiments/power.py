"""How long to run: the sample each variant needs to detect a minimum detectable effect.

For a relative effect ``mde`` on a metric with baseline mean ``m`` and per-person variance
``v`` (the control's so far), equal groups of ``n`` persons give the effect a standard error
``se(n) = sqrt(v (1 + (1 + mde)²) / (m² n))`` (the delta method, the variant's variance taken
as the control's). The sample needed is the smallest ``n`` with
``mde >= (c(n) + z_power) · se(n)``: ``c`` is ``z_{1 - alpha/2}`` for the fixed-horizon test,
so ``n = v (1 + (1 + mde)²) (z_{1-alpha/2} + z_power)² / (m mde)²``, and the confidence
sequence's half-width factor at ``2n`` persons for sequential results (found by bisection:
a confidence sequence needs more persons for the same power).
"""

from __future__ import annotations

import math

from scipy import special

from flagstaff.experiments.sequential import half_width_factor

__all__ = ["POWER", "days_to_reach", "required_sample"]

POWER = 0.8
_MAX_SAMPLE = 10**12


def required_sample(
    mean: float,
    variance: float,
    *,
    mde: float,
    alpha: float,
    sequential_tuning: float | None = None,
    power: float = POWER,
) -> int | None:
    """Persons per variant to detect a relative ``mde`` (None: no mean or no variance yet)."""
    if mean == 0 or not variance > 0 or not mde > 0:
        return None
    spread = variance * (1 + (1 + mde) ** 2) / (mean * mean)
    z_power = float(special.ndtri(power))
    if sequential_tuning is None:
        z_alpha = float(special.ndtri(1 - alpha / 2))
        return max(2, math.ceil(spread * (z_alpha + z_power) ** 2 / (mde * mde)))

    def detects(n: int) -> bool:
        factor = half_width_factor(2 * n, alpha=alpha, tuning=sequential_tuning)
        return mde >= (factor + z_power) * math.sqrt(spread / n)

    low, high = 1, 2
    while not detects(high):
        low, high = high, high * 2
        if high > _MAX_SAMPLE:
            return None
    while high - low > 1:
        middle = (low + high) // 2
        if detects(middle):
            high = middle
        else:
            low = middle
    return max(2, high)


def days_to_reach(needed: int, exposed: dict[str, int], elapsed_days: float) -> float | None:
    """More days until every variant has ``needed`` persons at its exposure rate so far
    (0 when they have; None when the rate is unknown: nobody exposed, or no time elapsed)."""
    if not exposed:
        return None
    remaining = 0.0
    for count in exposed.values():
        if count >= needed:
            continue
        if count == 0 or elapsed_days <= 0:
            return None
        remaining = max(remaining, (needed - count) / (count / elapsed_days))
    return remaining
