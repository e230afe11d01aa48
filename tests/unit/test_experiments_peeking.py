"""An A/A test read after every tenth of its data stays honest with sequential results.

Many simulated A/A experiments (the same conversion rate in both groups; a fixed seed) are
read ten times each, after every tenth of their persons. Fixed-horizon p-values read that way
call a winner at some look far more often than alpha; the always-valid p-values of the
confidence sequence call one at most alpha of the time. The tolerance is statistical: with
``E`` experiments the measured rate's standard error is ``sqrt(alpha (1 - alpha) / E)``, and
the sequential rate must stay below ``alpha`` plus three of them. Measured rates (more
experiments): docs/experiments.md.
"""

from __future__ import annotations

import math

import numpy as np

from flagstaff.experiments.sequential import sequential_test
from flagstaff.experiments.stats import relative_effect, t_test

ALPHA = 0.05
EXPERIMENTS = 1500
PERSONS = 10_000  # per group
LOOKS = 10


def peeking_rates(
    experiments: int, persons: int, looks: int, seed: int, rate: float = 0.1
) -> tuple[float, float, float]:
    """(fixed-horizon at any look, fixed-horizon at the last look, sequential at any look)."""
    rng = np.random.default_rng(seed)
    step = persons // looks
    conversions = rng.binomial(step, rate, size=(2, experiments, looks)).cumsum(axis=2)
    fixed_any = fixed_last = sequential_any = 0
    for experiment in range(experiments):
        fixed_hit = sequential_hit = False
        for look in range(looks):
            n = step * (look + 1)
            control = conversions[0, experiment, look] / n
            treatment = conversions[1, experiment, look] / n
            effect = relative_effect(
                treatment, treatment * (1 - treatment), n, control, control * (1 - control), n
            )
            fixed = t_test(effect, alpha=ALPHA).significant
            fixed_hit |= fixed
            sequential_hit |= sequential_test(effect, alpha=ALPHA, tuning=5000).significant
            if look == looks - 1:
                fixed_last += fixed
        fixed_any += fixed_hit
        sequential_any += sequential_hit
    return fixed_any / experiments, fixed_last / experiments, sequential_any / experiments


def test_sequential_results_call_a_winner_at_most_alpha_of_the_time() -> None:
    fixed_any, fixed_last, sequential_any = peeking_rates(EXPERIMENTS, PERSONS, LOOKS, seed=38)
    margin = 3 * math.sqrt(ALPHA * (1 - ALPHA) / EXPERIMENTS)
    assert sequential_any <= ALPHA + margin
    # read once, at the end, the fixed-horizon test is honest too ...
    assert abs(fixed_last - ALPHA) <= margin
    # ... but read ten times it calls a winner far more often than alpha
    assert fixed_any >= 2.5 * ALPHA
    assert fixed_any >= 4 * sequential_any
