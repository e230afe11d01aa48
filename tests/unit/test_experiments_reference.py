"""Flagstaff's frequentist, sequential and CUPED statistics against gbstats 0.8.0.

GrowthBook's stats engine (a test-only dependency, never imported at run time) is the
reference: on the same summary statistics, effects, intervals and p-values agree to 1e-6.
The corrections agree with statsmodels' ``multipletests``. Summary statistics are drawn from
a seeded RNG, so each case is a different, realistic experiment.
"""

from __future__ import annotations

import numpy as np
import pytest
from gbstats.frequentist.tests import (
    FrequentistConfig,
    SequentialConfig,
    SequentialTwoSidedTTest,
    TwoSidedTTest,
)
from gbstats.models import statistics as gb
from statsmodels.stats.multitest import multipletests

from flagstaff.experiments.corrections import adjust_p_values
from flagstaff.experiments.cuped import CupedStatistic, cuped_effect
from flagstaff.experiments.sequential import sequential_test
from flagstaff.experiments.stats import (
    FrequentistComparison,
    MeanStatistic,
    ProportionStatistic,
    RatioStatistic,
    frequentist,
    relative_effect,
    t_test,
)

TOLERANCE = 1e-6
SEED = 38


def _close(ours: FrequentistComparison, theirs: object) -> None:
    result = theirs.compute_result()  # type: ignore[attr-defined]
    assert result.error_message is None
    assert ours.effect == pytest.approx(result.expected, abs=TOLERANCE, rel=TOLERANCE)
    assert ours.p_value == pytest.approx(result.p_value, abs=TOLERANCE, rel=TOLERANCE)
    for mine, reference in zip(ours.confidence_interval, result.ci, strict=True):
        assert mine == pytest.approx(reference, abs=TOLERANCE, rel=TOLERANCE)


def _sample(rng: np.random.Generator, n: int, lift: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-person pre-exposure values and metric values correlated with them."""
    pre = rng.gamma(2.0, 3.0, size=n)
    post = 0.7 * pre + rng.gamma(2.0, 2.0, size=n) * (1 + lift)
    return pre, post


def _mean_pair(
    rng: np.random.Generator,
) -> tuple[MeanStatistic, MeanStatistic, gb.SampleMeanStatistic, gb.SampleMeanStatistic]:
    out = []
    for lift in (0.0, rng.uniform(-0.05, 0.08)):
        _, post = _sample(rng, int(rng.integers(200, 5000)), lift)
        out.append((len(post), float(post.sum()), float((post**2).sum())))
    (nc, sc, qc), (nt, st, qt) = out
    return (
        MeanStatistic(nt, st, qt),
        MeanStatistic(nc, sc, qc),
        gb.SampleMeanStatistic(n=nt, sum=st, sum_squares=qt),
        gb.SampleMeanStatistic(n=nc, sum=sc, sum_squares=qc),
    )


def _proportion_pair(
    rng: np.random.Generator,
) -> tuple[
    ProportionStatistic, ProportionStatistic, gb.ProportionStatistic, gb.ProportionStatistic
]:
    nc, nt = int(rng.integers(300, 8000)), int(rng.integers(300, 8000))
    pc = rng.uniform(0.05, 0.4)
    sc = float(rng.binomial(nc, pc))
    st = float(rng.binomial(nt, pc * (1 + rng.uniform(-0.1, 0.15))))
    return (
        ProportionStatistic(nt, st),
        ProportionStatistic(nc, sc),
        gb.ProportionStatistic(n=nt, sum=st),
        gb.ProportionStatistic(n=nc, sum=sc),
    )


def _ratio(rng: np.random.Generator, lift: float) -> tuple[RatioStatistic, gb.RatioStatistic]:
    n = int(rng.integers(300, 5000))
    denominator = rng.poisson(3.0, size=n) + 1.0
    numerator = denominator * rng.gamma(2.0, 1.5, size=n) * (1 + lift)
    m = (float(numerator.sum()), float((numerator**2).sum()))
    d = (float(denominator.sum()), float((denominator**2).sum()))
    product = float((numerator * denominator).sum())
    ours = RatioStatistic(n, MeanStatistic(n, *m), MeanStatistic(n, *d), product)
    theirs = gb.RatioStatistic(
        n=n,
        m_statistic=gb.SampleMeanStatistic(n=n, sum=m[0], sum_squares=m[1]),
        d_statistic=gb.SampleMeanStatistic(n=n, sum=d[0], sum_squares=d[1]),
        m_d_sum_of_products=product,
    )
    return ours, theirs


def _pairs(kind: str, rng: np.random.Generator) -> tuple[object, object, object, object]:
    if kind == "mean":
        return _mean_pair(rng)
    if kind == "funnel":
        return _proportion_pair(rng)
    treatment, gb_treatment = _ratio(rng, rng.uniform(-0.05, 0.08))
    control, gb_control = _ratio(rng, 0.0)
    return treatment, control, gb_treatment, gb_control


@pytest.mark.parametrize("kind", ["mean", "funnel", "ratio"])
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_fixed_horizon_agrees_with_gbstats(kind: str, alpha: float) -> None:
    rng = np.random.default_rng([SEED, len(kind), int(alpha * 100)])
    for _ in range(20):
        treatment, control, gb_treatment, gb_control = _pairs(kind, rng)
        ours = frequentist(treatment, control, alpha=alpha)  # type: ignore[arg-type]
        _close(ours, TwoSidedTTest(gb_control, gb_treatment, FrequentistConfig(alpha=alpha)))


@pytest.mark.parametrize("kind", ["mean", "funnel", "ratio"])
@pytest.mark.parametrize("tuning", [5000.0, 500.0, 20000.0])
def test_sequential_agrees_with_gbstats(kind: str, tuning: float) -> None:
    rng = np.random.default_rng([SEED, len(kind), int(tuning)])
    for alpha in (0.05, 0.01):
        for _ in range(10):
            treatment, control, gb_treatment, gb_control = _pairs(kind, rng)
            relative = relative_effect(
                treatment.mean,  # type: ignore[attr-defined]
                treatment.variance,  # type: ignore[attr-defined]
                treatment.n,  # type: ignore[attr-defined]
                control.mean,  # type: ignore[attr-defined]
                control.variance,  # type: ignore[attr-defined]
                control.n,  # type: ignore[attr-defined]
            )
            ours = sequential_test(relative, alpha=alpha, tuning=tuning)
            config = SequentialConfig(alpha=alpha, sequential_tuning_parameter=tuning)
            _close(ours, SequentialTwoSidedTTest(gb_control, gb_treatment, config))


def _cuped_group(
    rng: np.random.Generator, n: int, lift: float, funnel: bool
) -> tuple[CupedStatistic, gb.RegressionAdjustedStatistic]:
    pre, post = _sample(rng, n, lift)
    if funnel:
        pre = (pre > 6.0).astype(float)
        post = (post + 3 * pre > 12.0).astype(float)
        ours_post: MeanStatistic | ProportionStatistic = ProportionStatistic(n, float(post.sum()))
        ours_pre: MeanStatistic | ProportionStatistic = ProportionStatistic(n, float(pre.sum()))
        gb_post: object = gb.ProportionStatistic(n=n, sum=float(post.sum()))
        gb_pre: object = gb.ProportionStatistic(n=n, sum=float(pre.sum()))
    else:
        ours_post = MeanStatistic(n, float(post.sum()), float((post**2).sum()))
        ours_pre = MeanStatistic(n, float(pre.sum()), float((pre**2).sum()))
        gb_post = gb.SampleMeanStatistic(
            n=n, sum=float(post.sum()), sum_squares=float((post**2).sum())
        )
        gb_pre = gb.SampleMeanStatistic(
            n=n, sum=float(pre.sum()), sum_squares=float((pre**2).sum())
        )
    product = float((pre * post).sum())
    theirs = gb.RegressionAdjustedStatistic(
        n=n, post_statistic=gb_post, pre_statistic=gb_pre, post_pre_sum_of_products=product, theta=0
    )
    return CupedStatistic(ours_post, ours_pre, product), theirs


@pytest.mark.parametrize("funnel", [False, True])
@pytest.mark.parametrize("sequential", [False, True])
def test_cuped_agrees_with_gbstats(funnel: bool, sequential: bool) -> None:
    rng = np.random.default_rng([SEED, int(funnel), int(sequential)])
    for _ in range(15):
        control, gb_control = _cuped_group(rng, int(rng.integers(300, 5000)), 0.0, funnel)
        lift = rng.uniform(-0.05, 0.1)
        treatment, gb_treatment = _cuped_group(rng, int(rng.integers(300, 5000)), lift, funnel)
        adjusted = cuped_effect(treatment, control)
        assert 0 < adjusted.variance_reduction < 1
        if sequential:
            ours = sequential_test(adjusted.relative, alpha=0.05, tuning=5000)
            test: object = SequentialTwoSidedTTest(gb_control, gb_treatment, SequentialConfig())
        else:
            ours = t_test(adjusted.relative, alpha=0.05)
            test = TwoSidedTTest(gb_control, gb_treatment, FrequentistConfig())
        assert adjusted.theta == pytest.approx(test.stat_a.theta, rel=1e-9)  # type: ignore[attr-defined]
        _close(ours, test)


def test_cuped_reduces_the_interval_by_the_reported_variance_reduction() -> None:
    rng = np.random.default_rng(SEED)
    control, _ = _cuped_group(rng, 4000, 0.0, False)
    treatment, _ = _cuped_group(rng, 4000, 0.05, False)
    adjusted = cuped_effect(treatment, control)
    plain = frequentist(treatment.post, control.post)  # type: ignore[arg-type]
    cuped = t_test(adjusted.relative)
    width = plain.confidence_interval[1] - plain.confidence_interval[0]
    cuped_width = cuped.confidence_interval[1] - cuped.confidence_interval[0]
    # the width scales as the standard error (and t's factor barely moves with the dof)
    assert cuped_width / width == pytest.approx((1 - adjusted.variance_reduction) ** 0.5, rel=1e-3)


@pytest.mark.parametrize(("ours", "theirs"), [("holm", "holm"), ("benjamini_hochberg", "fdr_bh")])
def test_corrections_agree_with_statsmodels(ours: str, theirs: str) -> None:
    rng = np.random.default_rng(SEED)
    for _ in range(25):  # multipletests takes 60 ms a call
        p_values = list(rng.uniform(0, 1, size=int(rng.integers(1, 15))) ** rng.uniform(1, 5))
        p_values[0] = p_values[-1]  # ties
        adjusted = adjust_p_values(p_values, ours)  # type: ignore[arg-type]
        assert adjusted == pytest.approx(list(multipletests(p_values, method=theirs)[1]), abs=1e-12)
    assert adjust_p_values([0.2, 0.01], "none") == [0.2, 0.01]
