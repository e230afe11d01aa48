"""The results response: per metric, the baseline and each variant in PostHog's shape.

Each metric reports ``baseline`` (the control) and ``variant_results`` (every test variant,
compared with the control), as PostHog's ``ExperimentQueryResponse`` does: ``key``,
``number_of_samples`` (exposed persons), ``sum`` and ``sum_squares`` (for a funnel, the persons
who converted; for a mean, the sum over persons of each person's value and of its square; for
a ratio, of the numerator, with ``denominator_sum``, ``denominator_sum_squares`` and
``numerator_denominator_sum_product``), ``step_counts`` for funnels, ``mean`` (the conversion
rate, the mean per person, or the ratio), ``validation_failures`` (PostHog's
``not-enough-exposures``, ``not-enough-metric-data``, ``baseline-mean-is-zero``), and the
method's fields: ``chance_to_win``, ``credible_interval`` (Bayesian) or ``p_value``,
``confidence_interval`` (frequentist), with ``significant`` and ``method``. Intervals are of the
relative effect. ``chance_to_win`` is P(variant > control) whatever the metric's ``goal``, as
in PostHog's API; a client shows ``1 - chance_to_win`` for a metric whose goal is ``decrease``.

Holdout persons (``holdout-<id>``) are reported apart: ``holdout_results`` per metric, compared
with the control the same way, and ``holdout_exposures``. The response also carries exposures
per variant, the persons excluded for seeing several variants, the sample-ratio-mismatch test
against the configured split, and warnings.

Trusted decisions (``stats_config``, resolved in ``stats_config_applied``): frequentist
results may be sequential (confidence sequences, always-valid p-values: ``sequential.py``);
mean and funnel metrics may be CUPED-adjusted when the pre-exposure sums are there
(``cuped_variance_reduction`` per variant: ``cuped.py``); frequentist p-values of every
primary and secondary metric x variant are corrected together (``p_value_adjusted``,
``significant`` follows it: ``corrections.py``). Each primary metric carries ``sample_size``:
persons per variant to detect the minimum detectable effect at 80% power, and the days that
takes at the exposure rate so far (``power.py``). ``metrics_guardrail`` are always judged by
confidence sequences at the experiment's alpha; a variant significantly worse on one is in
``guardrail_breaches`` (``guardrails.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from flagstaff.common.units import DAY_S
from flagstaff.experiments.corrections import adjust_p_values
from flagstaff.experiments.cuped import CupedStatistic, cuped_effect
from flagstaff.experiments.decision import Decision, decide
from flagstaff.experiments.exposure import ExperimentSummary, VariantStatistics
from flagstaff.experiments.guardrails import GuardrailBreach, guardrail_state
from flagstaff.experiments.model import (
    CONTROL_VARIANT_KEY,
    ExperimentDefinition,
    FunnelMetric,
    MeanMetric,
    Metric,
    StatsApplied,
    applied_stats,
)
from flagstaff.experiments.power import days_to_reach, required_sample
from flagstaff.experiments.sequential import sequential_test
from flagstaff.experiments.stats import (
    MIN_EXPOSURES,
    FrequentistComparison,
    MeanStatistic,
    ProportionStatistic,
    RatioStatistic,
    RelativeEffect,
    SampleRatioMismatch,
    Statistic,
    StatisticError,
    bayesian_checks,
    bayesian_effect,
    relative_effect,
    sample_ratio_mismatch,
    t_test,
    validation_failures,
)

__all__ = [
    "ExperimentResults",
    "MetricResult",
    "SampleSize",
    "VariantResult",
    "Warning",
    "build_results",
]


class VariantResult(msgspec.Struct, kw_only=True):
    key: str
    number_of_samples: int
    sum: float
    sum_squares: float
    mean: float | None
    denominator_sum: float | None = None
    denominator_sum_squares: float | None = None
    numerator_denominator_sum_product: float | None = None
    step_counts: list[int] | None = None
    pre_sum: float | None = None
    pre_sum_squares: float | None = None
    pre_post_sum_product: float | None = None
    validation_failures: list[str] = msgspec.field(default_factory=list)
    method: Literal["bayesian", "frequentist"] | None = None
    effect: float | None = None
    """Relative effect against the baseline (the Bayesian posterior mean, or the observed)."""
    chance_to_win: float | None = None
    credible_interval: tuple[float, float] | None = None
    p_value: float | None = None
    confidence_interval: tuple[float, float] | None = None
    sequential: bool | None = None
    """The interval is a confidence sequence and the p-value always valid."""
    p_value_adjusted: float | None = None
    """After the experiment's multiple-testing correction (the p-value itself without one)."""
    significant: bool | None = None
    cuped_variance_reduction: float | None = None
    """1 - var(CUPED effect) / var(unadjusted effect): the share of variance CUPED removed."""
    guardrail_state: Literal["breached", "clear"] | None = None
    """On a guardrail metric: significantly worse (breached) or not (clear)."""
    error: str | None = None
    """Why no statistics were computed although the validation passed."""


class SampleSize(msgspec.Struct, kw_only=True):
    minimum_detectable_effect: float
    per_variant: int | None
    """Persons each variant needs to detect the effect at 80% power (None: no data yet)."""
    days_remaining: float | None
    """More days to reach it at the exposure rate so far (0: reached; None: unknown)."""


class MetricResult(msgspec.Struct, kw_only=True):
    uuid: str
    name: str | None
    metric_type: Literal["funnel", "mean", "ratio"]
    goal: Literal["increase", "decrease"]
    baseline: VariantResult
    variant_results: list[VariantResult]
    holdout_results: list[VariantResult]
    sample_size: SampleSize | None = None


class Warning(msgspec.Struct, kw_only=True):
    code: str
    message: str
    variant: str | None = None


class ExperimentResults(msgspec.Struct, kw_only=True):
    stats_method: Literal["bayesian", "frequentist"]
    stats_config_applied: StatsApplied
    exposures: dict[str, int]
    holdout_exposures: dict[str, int]
    multiple_variant_persons: int
    sample_ratio_mismatch: SampleRatioMismatch | None
    warnings: list[Warning]
    metrics: list[MetricResult]
    metrics_secondary: list[MetricResult]
    metrics_guardrail: list[MetricResult] = msgspec.field(default_factory=list)
    guardrail_breaches: list[GuardrailBreach] = msgspec.field(default_factory=list)
    decision: Decision | None = None
    """Ship a variant, keep running (about N more days) or stop for harm, with the reason."""


def _statistic(metric: Metric, row: VariantStatistics) -> Statistic:
    n = row.number_of_samples
    if isinstance(metric, FunnelMetric):
        return ProportionStatistic(n, row.sum)
    numerator = MeanStatistic(n, row.sum, row.sum_squares)
    if isinstance(metric, MeanMetric):
        return numerator
    denominator = MeanStatistic(n, row.denominator_sum or 0.0, row.denominator_sum_squares or 0.0)
    return RatioStatistic(n, numerator, denominator, row.numerator_denominator_sum_product or 0.0)


def _cuped_statistic(metric: Metric, row: VariantStatistics) -> CupedStatistic | None:
    """The row with its pre-exposure sums (None: a ratio, or the sums are not there)."""
    if row.pre_sum is None or row.pre_post_sum_product is None:
        return None
    n = row.number_of_samples
    if isinstance(metric, FunnelMetric):
        return CupedStatistic(
            ProportionStatistic(n, row.sum),
            ProportionStatistic(n, row.pre_sum),
            row.pre_post_sum_product,
        )
    if isinstance(metric, MeanMetric) and row.pre_sum_squares is not None:
        return CupedStatistic(
            MeanStatistic(n, row.sum, row.sum_squares),
            MeanStatistic(n, row.pre_sum, row.pre_sum_squares),
            row.pre_post_sum_product,
        )
    return None


def _mean(metric: Metric, row: VariantStatistics) -> float | None:
    if isinstance(metric, FunnelMetric | MeanMetric):
        return row.sum / row.number_of_samples if row.number_of_samples else None
    return row.sum / row.denominator_sum if row.denominator_sum else None


def _variant(metric: Metric, row: VariantStatistics, *, baseline: bool) -> VariantResult:
    return VariantResult(
        key=row.key,
        number_of_samples=row.number_of_samples,
        sum=row.sum,
        sum_squares=row.sum_squares,
        mean=_mean(metric, row),
        denominator_sum=row.denominator_sum,
        denominator_sum_squares=row.denominator_sum_squares,
        numerator_denominator_sum_product=row.numerator_denominator_sum_product,
        step_counts=row.step_counts,
        pre_sum=row.pre_sum,
        pre_sum_squares=row.pre_sum_squares,
        pre_post_sum_product=row.pre_post_sum_product,
        validation_failures=validation_failures(
            row.number_of_samples,
            row.sum,
            funnel=isinstance(metric, FunnelMetric),
            baseline=baseline,
        ),
    )


def _effect(
    metric: Metric,
    inference: StatsApplied,
    row: VariantStatistics,
    control_row: VariantStatistics,
    result: VariantResult,
) -> RelativeEffect:
    treatment, control = _statistic(metric, row), _statistic(metric, control_row)
    if inference.cuped:
        adjusted_t, adjusted_c = (
            _cuped_statistic(metric, row),
            _cuped_statistic(metric, control_row),
        )
        if adjusted_t is not None and adjusted_c is not None:
            adjusted = cuped_effect(adjusted_t, adjusted_c)
            result.cuped_variance_reduction = adjusted.variance_reduction
            return adjusted.relative
    if type(treatment) is not type(control):
        raise StatisticError("Treatment and control statistics must be the same kind.")
    return relative_effect(
        treatment.mean, treatment.variance, treatment.n, control.mean, control.variance, control.n
    )


def _compare(
    metric: Metric,
    inference: StatsApplied,
    result: VariantResult,
    row: VariantStatistics,
    control_row: VariantStatistics | None,
) -> None:
    result.method = inference.method
    if control_row is None or result.validation_failures:
        return
    try:
        relative = _effect(metric, inference, row, control_row, result)
        if inference.method == "bayesian":
            bayesian_checks(_statistic(metric, row), _statistic(metric, control_row))
            comparison = bayesian_effect(relative)
            result.chance_to_win = comparison.chance_to_win
            result.credible_interval = comparison.credible_interval
            result.effect = comparison.effect
            result.significant = comparison.significant
            return
        outcome: FrequentistComparison = (
            sequential_test(
                relative, alpha=inference.alpha, tuning=inference.sequential_tuning_parameter
            )
            if inference.sequential
            else t_test(relative, alpha=inference.alpha)
        )
        result.sequential = inference.sequential
        result.p_value = outcome.p_value
        result.p_value_adjusted = outcome.p_value
        result.confidence_interval = outcome.confidence_interval
        result.effect = outcome.effect
        result.significant = outcome.significant
    except StatisticError as error:
        result.error = str(error)
        result.cuped_variance_reduction = None


def _metric_result(
    metric: Metric,
    rows: list[VariantStatistics],
    inference: StatsApplied,
    holdouts: set[str],
) -> MetricResult:
    by_key = {row.key: row for row in rows}
    control_row = by_key.get(CONTROL_VARIANT_KEY) or VariantStatistics(
        key=CONTROL_VARIANT_KEY, number_of_samples=0, sum=0.0, sum_squares=0.0
    )
    baseline = _variant(metric, control_row, baseline=True)
    usable_control = None if baseline.validation_failures else control_row
    variants: list[VariantResult] = []
    held: list[VariantResult] = []
    for row in rows:
        if row.key == CONTROL_VARIANT_KEY:
            continue
        result = _variant(metric, row, baseline=False)
        _compare(metric, inference, result, row, usable_control)
        (held if row.key in holdouts else variants).append(result)
    return MetricResult(
        uuid=metric.uuid,
        name=metric.name,
        metric_type=metric.__struct_config__.tag,  # type: ignore[arg-type]  # the tags are these
        goal=metric.goal,
        baseline=baseline,
        variant_results=variants,
        holdout_results=held,
    )


def _sample_size(
    metric: Metric,
    rows: list[VariantStatistics],
    applied: StatsApplied,
    exposures: dict[str, int],
    elapsed_days: float,
) -> SampleSize:
    mde = applied.minimum_detectable_effect
    control_row = next((row for row in rows if row.key == CONTROL_VARIANT_KEY), None)
    needed = None
    if control_row is not None and control_row.number_of_samples >= 2:
        try:
            control = _statistic(metric, control_row)
            needed = required_sample(
                control.mean,
                control.variance,
                mde=mde,
                alpha=applied.alpha,
                sequential_tuning=applied.sequential_tuning_parameter
                if applied.sequential
                else None,
            )
        except StatisticError:
            needed = None
    return SampleSize(
        minimum_detectable_effect=mde,
        per_variant=needed,
        days_remaining=None if needed is None else days_to_reach(needed, exposures, elapsed_days),
    )


def _elapsed_days(definition: ExperimentDefinition, now: datetime | None) -> float:
    if definition.start_date is None or now is None:
        return 0.0
    end = now if definition.end_date is None else min(now, definition.end_date)
    return max((end - definition.start_date).total_seconds() / DAY_S, 0.0)


def _correct(families: list[MetricResult], applied: StatsApplied) -> None:
    """Adjust the p-values of every metric x variant together; ``significant`` follows."""
    tested = [
        (result, result.p_value)
        for metric in families
        for result in metric.variant_results
        if result.p_value is not None
    ]
    method = applied.multiple_testing_correction
    adjusted = adjust_p_values([p_value for _, p_value in tested], method)
    for (result, _), p_value in zip(tested, adjusted, strict=True):
        result.p_value_adjusted = p_value
        result.significant = p_value < applied.alpha


def _breaches(guardrails: list[MetricResult]) -> list[GuardrailBreach]:
    found = []
    for metric in guardrails:
        for result in metric.variant_results:
            if result.confidence_interval is None or result.p_value is None:
                continue
            result.guardrail_state = guardrail_state(metric.goal, result.confidence_interval)
            if result.guardrail_state == "breached":
                found.append(
                    GuardrailBreach(
                        metric_uuid=metric.uuid,
                        metric_name=metric.name,
                        variant=result.key,
                        goal=metric.goal,
                        effect=result.effect or 0.0,
                        confidence_interval=result.confidence_interval,
                        p_value=result.p_value,
                    )
                )
    return found


def build_results(
    definition: ExperimentDefinition,
    summary: ExperimentSummary,
    now: datetime | None = None,
) -> ExperimentResults:
    """The results response for one experiment from its per-variant sufficient statistics
    (``now`` dates the exposure rate of the sample-size estimate)."""
    applied = applied_stats(definition.stats_config, definition.parameters)
    method = applied.method
    holdouts = set(summary.holdout_variants)
    exposures = {k: v for k, v in summary.exposures.items() if k not in holdouts}
    holdout_exposures = {k: v for k, v in summary.exposures.items() if k in holdouts}
    split = {variant.key: variant.rollout_percentage for variant in definition.variants}
    srm = sample_ratio_mismatch(exposures, split)
    warnings: list[Warning] = []
    if definition.start_date is None:
        warnings.append(
            Warning(code="not-started", message="The experiment has no start date yet.")
        )
    for key, count in exposures.items():
        if count < MIN_EXPOSURES:
            warnings.append(
                Warning(
                    code="not-enough-exposures",
                    message=f"{count} persons exposed; statistics need at least {MIN_EXPOSURES}.",
                    variant=key,
                )
            )
    if srm is not None and srm.mismatch:
        warnings.append(
            Warning(
                code="sample-ratio-mismatch",
                message=(
                    "Persons are not split across variants as configured "
                    f"(chi-square p = {srm.p_value:.2g}); check the flag and the exposure events."
                ),
            )
        )
    if summary.multiple_variant_persons:
        warnings.append(
            Warning(
                code="multiple-variant-persons",
                message=(
                    f"{summary.multiple_variant_persons} persons saw more than one variant "
                    "and are excluded."
                ),
            )
        )
    # guardrails: always a confidence sequence at the experiment's alpha, never corrected
    guarded = msgspec.structs.replace(applied, method="frequentist", sequential=True)

    def results_of(metrics: list[Metric], how: StatsApplied) -> list[MetricResult]:
        return [
            _metric_result(metric, summary.metrics.get(metric.uuid, []), how, holdouts)
            for metric in metrics
        ]

    primary = results_of(definition.metrics, applied)
    secondary = results_of(definition.metrics_secondary, applied)
    guardrails = results_of(definition.metrics_guardrail, guarded)
    if method == "frequentist":
        _correct([*primary, *secondary], applied)
    elapsed = _elapsed_days(definition, now)
    for metric, result in zip(definition.metrics, primary, strict=True):
        result.sample_size = _sample_size(
            metric, summary.metrics.get(metric.uuid, []), applied, exposures, elapsed
        )
    breaches = _breaches(guardrails)
    return ExperimentResults(
        stats_method=method,
        stats_config_applied=applied,
        exposures=exposures,
        holdout_exposures=holdout_exposures,
        multiple_variant_persons=summary.multiple_variant_persons,
        sample_ratio_mismatch=srm,
        warnings=warnings,
        metrics=primary,
        metrics_secondary=secondary,
        metrics_guardrail=guardrails,
        guardrail_breaches=breaches,
        decision=decide(primary, breaches),
    )


def to_json(results: ExperimentResults) -> dict[str, Any]:
    """Plain JSON-ready data (tuples become lists)."""
    return msgspec.to_builtins(results)
