"""Experiment statistics pinned against known answers.

The reference numbers are facts published in PostHog's statistics tests
(``products/experiments/stats/tests/test_bayesian.py`` and ``test_frequentist.py`` in
PostHog/posthog; the inputs are GrowthBook's gbstats test cases) and in the SRM literature.
"""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from flagstaff.experiments.stats import (
    BASELINE_MEAN_IS_ZERO,
    NOT_ENOUGH_EXPOSURES,
    NOT_ENOUGH_METRIC_DATA,
    MeanStatistic,
    ProportionStatistic,
    RatioStatistic,
    StatisticError,
    bayesian,
    frequentist,
    sample_ratio_mismatch,
    validation_failures,
)

# PostHog test_bayesian.py::test_realistic_example and test_frequentist.py::
# test_two_sided_ttest_with_sample_mean: treatment n=2461 sum=1922.7 sum_squares=94698.29,
# control n=2507 sum=1196.87 sum_squares=37377.9767.
MEAN_TREATMENT = MeanStatistic(2461, 1922.7, 94698.29)
MEAN_CONTROL = MeanStatistic(2507, 1196.87, 37377.9767)


def test_bayesian_mean_matches_posthog() -> None:
    # Expected (PostHog, 4 places): effect 0.63646, credible interval [-0.0873, 1.36026],
    # chance to win 0.95759.
    result = bayesian(MEAN_TREATMENT, MEAN_CONTROL)
    assert result.effect == pytest.approx(0.63646, abs=1e-4)
    assert result.credible_interval[0] == pytest.approx(-0.0873, abs=1e-4)
    assert result.credible_interval[1] == pytest.approx(1.36026, abs=1e-4)
    assert result.chance_to_win == pytest.approx(0.95759, abs=1e-4)
    assert result.significant  # 0.9576 > 0.95: PostHog's is_decisive


def test_frequentist_mean_matches_posthog() -> None:
    # Expected (PostHog): effect 0.63646, p 0.08487, confidence interval [-0.0875, 1.36048].
    result = frequentist(MEAN_TREATMENT, MEAN_CONTROL)
    assert result.effect == pytest.approx(0.63646, abs=1e-4)
    assert result.p_value == pytest.approx(0.08487, abs=1e-4)
    assert result.confidence_interval[0] == pytest.approx(-0.0875, abs=1e-4)
    assert result.confidence_interval[1] == pytest.approx(1.36048, abs=1e-4)
    assert not result.significant


def test_frequentist_proportion_matches_posthog() -> None:
    # PostHog test_two_sided_ttest_with_sample_proportion: 62/1471 against 87/1529.
    # Expected: effect -0.25925, p 0.030960, confidence interval [-0.49475, -0.02376].
    result = frequentist(ProportionStatistic(1471, 62), ProportionStatistic(1529, 87))
    assert result.effect == pytest.approx(-0.25925, abs=1e-4)
    assert result.p_value == pytest.approx(0.030960, abs=1e-4)
    assert result.confidence_interval[0] == pytest.approx(-0.49475, abs=1e-4)
    assert result.confidence_interval[1] == pytest.approx(-0.02376, abs=1e-4)
    assert result.significant


def test_frequentist_ratio_matches_posthog() -> None:
    # PostHog test_two_sided_ttest_with_ratio_statistic (revenue per order).
    # Expected: effect 0.041333, p 0.0032826, confidence interval [0.01378609, 0.0689].
    treatment = RatioStatistic(
        2034,
        MeanStatistic(2034, 99673.9364269569, 11298745.182728939),
        MeanStatistic(2034, 947, 947),
        99673.9364269569,
    )
    control = RatioStatistic(
        1966,
        MeanStatistic(1966, 94605.79858780127, 10463129.505392816),
        MeanStatistic(1966, 936, 936),
        94605.79858780127,
    )
    result = frequentist(treatment, control)
    assert result.effect == pytest.approx(0.041333, abs=1e-4)
    assert result.p_value == pytest.approx(0.0032826, abs=1e-4)
    assert result.confidence_interval[0] == pytest.approx(0.01378609, abs=1e-4)
    assert result.confidence_interval[1] == pytest.approx(0.0689, abs=1e-4)


def test_welch_degrees_of_freedom_agree_with_scipy() -> None:
    # The Welch-Satterthwaite degrees of freedom are those of scipy's Welch t-test on the same
    # two samples: the absolute difference's t statistic reproduces scipy's p-value.
    a = [3.0, 4.0, 7.0, 1.0, 9.0, 4.0, 6.0, 2.0]
    b = [5.0, 8.0, 9.0, 12.0, 7.0, 10.0, 6.0]
    stat_a = MeanStatistic(len(a), sum(a), sum(x * x for x in a))
    stat_b = MeanStatistic(len(b), sum(b), sum(x * x for x in b))
    dof = frequentist(stat_a, stat_b).degrees_of_freedom
    t_abs = (stat_a.mean - stat_b.mean) / math.sqrt(
        stat_a.variance / stat_a.n + stat_b.variance / stat_b.n
    )
    expected = scipy_stats.ttest_ind(a, b, equal_var=False)
    assert 2 * scipy_stats.t.sf(abs(t_abs), dof) == pytest.approx(expected.pvalue, rel=1e-9)


def test_bayesian_interval_is_the_normal_interval_around_the_effect() -> None:
    # With a flat prior the credible interval is effect ± 1.959964 sd, and the chance to win
    # is Φ(effect / sd).
    treatment, control = ProportionStatistic(1000, 110), ProportionStatistic(1000, 100)
    result = bayesian(treatment, control)
    sd = math.sqrt(0.11 * 0.89 / (1000 * 0.01) + 0.11**2 * 0.1 * 0.9 / (1000 * 0.1**4))
    assert result.effect == pytest.approx(0.1)
    assert result.credible_interval[0] == pytest.approx(0.1 - 1.959964 * sd, rel=1e-6)
    assert result.credible_interval[1] == pytest.approx(0.1 + 1.959964 * sd, rel=1e-6)
    assert result.chance_to_win == pytest.approx(scipy_stats.norm.cdf(0.1 / sd), rel=1e-9)
    assert not result.significant
    flipped = bayesian(treatment, control, lower_is_better=True)
    assert flipped.chance_to_win == pytest.approx(1 - result.chance_to_win)


def test_sample_ratio_mismatch_published_example() -> None:
    # Kohavi, Tang & Xu, "Trustworthy Online Controlled Experiments" (2020), ch. 21: a 50/50
    # experiment with 821,588 and 815,482 users has an SRM p-value of about 1.8e-6.
    result = sample_ratio_mismatch({"control": 821588, "test": 815482}, {"control": 50, "test": 50})
    assert result is not None
    assert result.p_value == pytest.approx(1.8e-6, rel=0.05)
    assert result.mismatch
    assert result.expected == {"control": 818535.0, "test": 818535.0}


def test_sample_ratio_mismatch_uneven_split_and_no_mismatch() -> None:
    # 3 variants 50/25/25 with counts close to expectation: chi-square by hand.
    observed = {"control": 1010, "a": 495, "b": 495}
    result = sample_ratio_mismatch(observed, {"control": 50, "a": 25, "b": 25})
    assert result is not None
    expected_chi = 10**2 / 1000 + 5**2 / 500 + 5**2 / 500
    assert result.chi_square == pytest.approx(expected_chi)
    assert result.p_value == pytest.approx(scipy_stats.chi2.sf(expected_chi, 2))
    assert not result.mismatch
    assert sample_ratio_mismatch({"control": 0, "test": 0}, {"control": 50, "test": 50}) is None
    assert sample_ratio_mismatch({"control": 5}, {"control": 100}) is None


def test_validation_failures_use_posthog_thresholds() -> None:
    assert validation_failures(49, 10, funnel=False, baseline=False) == [NOT_ENOUGH_EXPOSURES]
    assert validation_failures(50, 10, funnel=False, baseline=False) == []
    assert validation_failures(50, 4, funnel=True, baseline=False) == [NOT_ENOUGH_METRIC_DATA]
    assert validation_failures(50, 0, funnel=False, baseline=True) == [BASELINE_MEAN_IS_ZERO]


def test_undefined_statistics_raise_clear_errors() -> None:
    with pytest.raises(StatisticError, match="baseline mean is zero"):
        frequentist(MeanStatistic(100, 5, 5), MeanStatistic(100, 0, 0))
    with pytest.raises(StatisticError, match="same kind"):
        bayesian(MeanStatistic(100, 5, 5), ProportionStatistic(100, 5))
    with pytest.raises(StatisticError, match="no variance"):
        bayesian(MeanStatistic(100, 100, 100), MeanStatistic(100, 100, 100))
    with pytest.raises(StatisticError, match="conversions and non-conversions"):
        bayesian(ProportionStatistic(100, 3), ProportionStatistic(100, 10))
    with pytest.raises(StatisticError, match="denominator is zero"):
        zero = MeanStatistic(10, 0, 0)
        one = MeanStatistic(10, 5, 5)
        frequentist(RatioStatistic(10, one, zero, 0), RatioStatistic(10, one, one, 5))
