"""The results response: PostHog's per-metric shape, method fields, holdouts, SRM, warnings."""

from __future__ import annotations

import math
from typing import Any

import pytest

from flagstaff.experiments.exposure import (
    ExperimentAccumulator,
    ExperimentEvent,
    ExperimentSpec,
    ExperimentSummary,
    VariantStatistics,
)
from flagstaff.experiments.model import parse_experiment
from flagstaff.experiments.results import build_results, to_json
from flagstaff.experiments.stats import ProportionStatistic, bayesian

START = 1_704_067_200_000


def definition(method: str = "bayesian", **overrides: Any) -> Any:
    data: dict[str, Any] = {
        "name": "Pricing",
        "feature_flag_key": "pricing",
        "start_date": "2024-01-01T00:00:00Z",
        "stats_config": {"method": method},
        "holdout_id": 9,
        "metrics": [
            {"uuid": "rev", "metric_type": "mean", "source": {"event": "purchase"}},
        ],
        "metrics_secondary": [
            {"uuid": "conv", "metric_type": "funnel", "series": [{"event": "purchase"}]},
        ],
    }
    data.update(overrides)
    return parse_experiment(data)


def summary_with(rows: dict[str, tuple[int, float, float]], funnel: dict[str, float]) -> Any:
    return ExperimentSummary(
        exposures={key: n for key, (n, _, _) in rows.items()},
        multiple_variant_persons=3,
        holdout_variants=["holdout-9"],
        metrics={
            "rev": [
                VariantStatistics(key=key, number_of_samples=n, sum=s, sum_squares=q)
                for key, (n, s, q) in rows.items()
            ],
            "conv": [
                VariantStatistics(
                    key=key,
                    number_of_samples=rows[key][0],
                    sum=converted,
                    sum_squares=converted,
                    step_counts=[int(converted)],
                )
                for key, converted in funnel.items()
            ],
        },
    )


# PostHog's pinned example (test_bayesian.py::test_realistic_example): control n=2507
# sum=1196.87 sum_squares=37377.9767, test n=2461 sum=1922.7 sum_squares=94698.29:
# chance to win 0.95759, credible interval [-0.0873, 1.36026]; frequentist p 0.08487,
# confidence interval [-0.0875, 1.36048].
ROWS = {
    "control": (2507, 1196.87, 37377.9767),
    "test": (2461, 1922.7, 94698.29),
    "holdout-9": (260, 120.0, 900.0),
}
FUNNEL = {"control": 300.0, "test": 340.0, "holdout-9": 2.0}


def test_bayesian_results_in_posthogs_shape() -> None:
    results = build_results(definition(), summary_with(ROWS, FUNNEL))
    assert results.stats_method == "bayesian"
    assert results.exposures == {"control": 2507, "test": 2461}
    assert results.holdout_exposures == {"holdout-9": 260}
    assert results.multiple_variant_persons == 3
    metric = results.metrics[0]
    assert (metric.uuid, metric.metric_type, metric.goal) == ("rev", "mean", "increase")
    assert metric.baseline.key == "control"
    assert metric.baseline.mean == pytest.approx(1196.87 / 2507)
    assert metric.baseline.validation_failures == []
    (test,) = metric.variant_results
    assert (test.key, test.number_of_samples, test.sum, test.sum_squares) == (
        "test",
        2461,
        1922.7,
        94698.29,
    )
    assert test.method == "bayesian"
    assert test.chance_to_win == pytest.approx(0.95759, abs=1e-4)
    assert test.credible_interval is not None
    assert test.credible_interval[0] == pytest.approx(-0.0873, abs=1e-4)
    assert test.credible_interval[1] == pytest.approx(1.36026, abs=1e-4)
    assert test.significant is True
    assert test.p_value is None and test.confidence_interval is None
    (holdout,) = metric.holdout_results
    assert holdout.key == "holdout-9" and holdout.chance_to_win is not None

    funnel = results.metrics_secondary[0]
    (variant,) = funnel.variant_results
    expected = bayesian(ProportionStatistic(2461, 340), ProportionStatistic(2507, 300))
    assert variant.chance_to_win == pytest.approx(expected.chance_to_win)
    assert variant.mean == pytest.approx(340 / 2461)
    assert variant.step_counts == [340]
    # The holdout converted twice: under PostHog's minimum of 5, no statistics.
    assert funnel.holdout_results[0].validation_failures == ["not-enough-metric-data"]
    assert funnel.holdout_results[0].chance_to_win is None

    payload = to_json(results)
    assert payload["metrics"][0]["variant_results"][0]["credible_interval"][1] == pytest.approx(
        1.36026, abs=1e-4
    )


def test_frequentist_results() -> None:
    results = build_results(definition("frequentist"), summary_with(ROWS, FUNNEL))
    (test,) = results.metrics[0].variant_results
    assert test.method == "frequentist"
    assert test.p_value == pytest.approx(0.08487, abs=1e-4)
    assert test.confidence_interval is not None
    assert test.confidence_interval[0] == pytest.approx(-0.0875, abs=1e-4)
    assert test.confidence_interval[1] == pytest.approx(1.36048, abs=1e-4)
    assert test.significant is False
    assert test.chance_to_win is None


def test_srm_and_warnings() -> None:
    results = build_results(definition(), summary_with(ROWS, FUNNEL))
    assert results.sample_ratio_mismatch is not None
    assert not results.sample_ratio_mismatch.mismatch  # 2507 against 2461 at 50/50
    codes = [warning.code for warning in results.warnings]
    assert codes == ["multiple-variant-persons"]

    skewed = dict(ROWS, test=(2000, 1500.0, 70000.0))
    results = build_results(definition(), summary_with(skewed, FUNNEL))
    assert results.sample_ratio_mismatch is not None and results.sample_ratio_mismatch.mismatch
    assert "sample-ratio-mismatch" in [warning.code for warning in results.warnings]


def test_too_few_samples_give_posthogs_validation_failures() -> None:
    rows = {"control": (40, 10.0, 30.0), "test": (60, 0.0, 0.0), "holdout-9": (0, 0.0, 0.0)}
    results = build_results(
        definition(start_date=None), summary_with(rows, {"control": 3.0, "test": 0.0})
    )
    metric = results.metrics[0]
    assert metric.baseline.validation_failures == ["not-enough-exposures"]
    assert metric.variant_results[0].validation_failures == []
    assert metric.variant_results[0].chance_to_win is None  # no usable baseline
    warnings = {(w.code, w.variant) for w in results.warnings}
    assert ("not-started", None) in warnings
    assert ("not-enough-exposures", "control") in warnings
    assert results.metrics[0].holdout_results[0].validation_failures == ["not-enough-exposures"]


def test_from_events_to_results() -> None:
    exp = definition(holdout_id=None, metrics_secondary=[])
    acc = ExperimentAccumulator([ExperimentSpec(1, exp)])
    for index in range(200):
        variant = "control" if index % 2 else "test"
        person = f"p{index}"
        props = {"$feature_flag": "pricing", "$feature_flag_response": variant}
        acc.add(ExperimentEvent(person, person, "$feature_flag_called", START + index, props))
        for order in range(index % 3 + (1 if variant == "test" else 0)):
            acc.add(ExperimentEvent(person, person, "purchase", START + 1000 + order, {}))
    results = build_results(exp, acc.summary(1))
    assert results.exposures == {"control": 100, "test": 100}
    metric = results.metrics[0]
    assert metric.baseline.sum == sum(i % 3 for i in range(1, 200, 2))
    assert metric.variant_results[0].sum == sum(i % 3 + 1 for i in range(0, 200, 2))
    assert metric.variant_results[0].chance_to_win is not None
    assert metric.variant_results[0].chance_to_win > 0.99


def _stats(**config: Any) -> dict[str, Any]:
    return {"method": "frequentist", **config}


def test_stats_config_applied_defaults_are_posthogs() -> None:
    results = build_results(definition(), summary_with(ROWS, FUNNEL))
    applied = results.stats_config_applied
    assert (applied.method, applied.alpha, applied.sequential, applied.cuped) == (
        "bayesian",
        0.05,
        False,
        False,
    )
    assert applied.multiple_testing_correction == "none"
    assert applied.sequential_tuning_parameter == 5000
    assert applied.minimum_detectable_effect == 0.05
    # sequential and corrections are frequentist: not applied under the Bayesian method
    bayes = definition(stats_config={"sequential": True, "multiple_testing_correction": "holm"})
    applied = build_results(bayes, summary_with(ROWS, FUNNEL)).stats_config_applied
    assert (applied.sequential, applied.multiple_testing_correction) == (False, "none")
    # PostHog's parameters.minimum_detectable_effect is a percentage
    percent = definition(parameters={"minimum_detectable_effect": 3})
    assert build_results(
        percent, summary_with(ROWS, FUNNEL)
    ).stats_config_applied.minimum_detectable_effect == pytest.approx(0.03)


def test_sequential_interval_is_wider_and_p_value_larger() -> None:
    fixed = build_results(definition("frequentist"), summary_with(ROWS, FUNNEL))
    always = build_results(
        definition(stats_config=_stats(sequential=True)), summary_with(ROWS, FUNNEL)
    )
    (f,) = fixed.metrics[0].variant_results
    (s,) = always.metrics[0].variant_results
    assert s.sequential is True and f.sequential is False
    assert s.effect == pytest.approx(f.effect)
    assert s.confidence_interval[0] < f.confidence_interval[0]  # type: ignore[index]
    assert s.confidence_interval[1] > f.confidence_interval[1]  # type: ignore[index]
    assert s.p_value > f.p_value  # type: ignore[operator]


def test_holm_adjusts_across_metrics_and_significance_follows() -> None:
    rows = dict(ROWS, test=(2461, 1400.0, 45000.0))
    plain = build_results(definition(stats_config=_stats()), summary_with(rows, FUNNEL))
    holm = build_results(
        definition(stats_config=_stats(multiple_testing_correction="holm")),
        summary_with(rows, FUNNEL),
    )
    p = [m.variant_results[0].p_value for m in [*plain.metrics, *plain.metrics_secondary]]
    adjusted = [m.variant_results[0] for m in [*holm.metrics, *holm.metrics_secondary]]
    low, high = sorted(p)  # type: ignore[type-var]
    assert sorted(r.p_value_adjusted for r in adjusted) == pytest.approx(  # type: ignore[type-var]
        [min(1, 2 * low), max(min(1, 2 * low), high)]
    )
    for result in adjusted:
        assert result.significant == (result.p_value_adjusted < 0.05)  # type: ignore[operator]
    assert [r.p_value_adjusted for m in plain.metrics for r in m.variant_results] == [p[0]]


def test_cuped_uses_the_pre_exposure_sums_and_reports_the_reduction() -> None:
    base = summary_with(ROWS, FUNNEL)
    for row in base.metrics["rev"]:
        # a covariate correlated with the metric: x = y / 2 + noise-free offset per person
        row.pre_sum = row.sum / 2 + row.number_of_samples
        row.pre_sum_squares = row.sum_squares / 4 + row.sum + row.number_of_samples * 1.2
        row.pre_post_sum_product = row.sum_squares / 2 + row.sum
    results = build_results(definition(stats_config=_stats(cuped=True)), base)
    (test,) = results.metrics[0].variant_results
    assert test.cuped_variance_reduction is not None and 0 < test.cuped_variance_reduction < 1
    # the funnel has no pre-exposure sums: unadjusted, no reduction reported
    assert results.metrics_secondary[0].variant_results[0].cuped_variance_reduction is None
    off = build_results(definition(stats_config=_stats()), base)
    assert off.metrics[0].variant_results[0].cuped_variance_reduction is None


def test_sample_size_and_days_remaining() -> None:
    from datetime import UTC, datetime

    now = datetime(2024, 1, 11, tzinfo=UTC)  # 10 days after the start
    results = build_results(definition("frequentist"), summary_with(ROWS, FUNNEL), now)
    size = results.metrics[0].sample_size
    assert size is not None and size.per_variant is not None
    # control: mean 0.477, variance 14.68 -> about 6.6 million persons per variant at 5%
    assert size.per_variant > 2507
    assert size.days_remaining == pytest.approx((size.per_variant - 2461) / 246.1, rel=1e-9)
    assert results.metrics_secondary[0].sample_size is None  # primary metrics only


def test_guardrail_breach_is_reported_only_when_significantly_worse() -> None:
    guard = {"uuid": "err", "metric_type": "mean", "goal": "decrease", "source": {"event": "e"}}
    summary = summary_with(ROWS, FUNNEL)
    # errors per person: control 0.10, test 0.20 over ~2500 persons: clearly worse
    summary.metrics["err"] = [
        VariantStatistics(key="control", number_of_samples=2507, sum=250.0, sum_squares=300.0),
        VariantStatistics(key="test", number_of_samples=2461, sum=492.0, sum_squares=600.0),
    ]
    results = build_results(definition(metrics_guardrail=[guard]), summary)
    (variant,) = results.metrics_guardrail[0].variant_results
    assert variant.sequential is True and variant.guardrail_state == "breached"
    (breach,) = results.guardrail_breaches
    assert (breach.metric_uuid, breach.variant) == ("err", "test")
    assert breach.confidence_interval[0] > 0
    # the same rise on a metric whose goal is to increase is good news, not a breach
    results = build_results(definition(metrics_guardrail=[dict(guard, goal="increase")]), summary)
    assert results.guardrail_breaches == []
    assert results.metrics_guardrail[0].variant_results[0].guardrail_state == "clear"
    # a small, not significant rise: never a breach
    summary.metrics["err"][1] = VariantStatistics(
        key="test", number_of_samples=2461, sum=256.0, sum_squares=300.0
    )
    assert build_results(definition(metrics_guardrail=[guard]), summary).guardrail_breaches == []


def test_the_decision_in_one_sentence() -> None:
    from datetime import UTC, datetime

    now = datetime(2024, 1, 11, tzinfo=UTC)
    # PostHog's example is not significant at 5% (p 0.085): keep running, about N days
    results = build_results(definition("frequentist"), summary_with(ROWS, FUNNEL), now)
    decision = results.decision
    assert decision is not None and decision.kind == "keep_running"
    assert decision.days_remaining == pytest.approx(
        results.metrics[0].sample_size.days_remaining  # type: ignore[union-attr]
    )
    assert f"about {math.ceil(decision.days_remaining)} more days" in decision.reason  # type: ignore[arg-type]
    # a clear win on the primary metric: ship it
    winning = dict(ROWS, test=(2461, 2461.0, 5000.0))
    decision = build_results(definition("frequentist"), summary_with(winning, FUNNEL), now).decision
    assert decision is not None and (decision.kind, decision.variant) == ("ship", "test")
    assert decision.reason.startswith("Ship test: it is significantly better")
    # the same win with a guardrail harmed: stop
    summary = summary_with(winning, FUNNEL)
    summary.metrics["err"] = [
        VariantStatistics(key="control", number_of_samples=2507, sum=250.0, sum_squares=300.0),
        VariantStatistics(key="test", number_of_samples=2461, sum=492.0, sum_squares=600.0),
    ]
    guard = {"uuid": "err", "metric_type": "mean", "goal": "decrease", "source": {"event": "e"}}
    decision = build_results(
        definition("frequentist", metrics_guardrail=[guard]), summary, now
    ).decision
    assert decision is not None and (decision.kind, decision.variant) == ("stop", "test")
    assert decision.reason.startswith("Stop: Guardrail 'err' rose for variant 'test'")
