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
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from flagstaff.experiments.exposure import ExperimentSummary, VariantStatistics
from flagstaff.experiments.model import (
    CONTROL_VARIANT_KEY,
    ExperimentDefinition,
    FunnelMetric,
    MeanMetric,
    Metric,
)
from flagstaff.experiments.stats import (
    MIN_EXPOSURES,
    MeanStatistic,
    ProportionStatistic,
    RatioStatistic,
    SampleRatioMismatch,
    Statistic,
    StatisticError,
    bayesian,
    frequentist,
    sample_ratio_mismatch,
    validation_failures,
)

__all__ = [
    "ExperimentResults",
    "MetricResult",
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
    significant: bool | None = None
    error: str | None = None
    """Why no statistics were computed although the validation passed."""


class MetricResult(msgspec.Struct, kw_only=True):
    uuid: str
    name: str | None
    metric_type: Literal["funnel", "mean", "ratio"]
    goal: Literal["increase", "decrease"]
    baseline: VariantResult
    variant_results: list[VariantResult]
    holdout_results: list[VariantResult]


class Warning(msgspec.Struct, kw_only=True):
    code: str
    message: str
    variant: str | None = None


class ExperimentResults(msgspec.Struct, kw_only=True):
    stats_method: Literal["bayesian", "frequentist"]
    exposures: dict[str, int]
    holdout_exposures: dict[str, int]
    multiple_variant_persons: int
    sample_ratio_mismatch: SampleRatioMismatch | None
    warnings: list[Warning]
    metrics: list[MetricResult]
    metrics_secondary: list[MetricResult]


def _statistic(metric: Metric, row: VariantStatistics) -> Statistic:
    n = row.number_of_samples
    if isinstance(metric, FunnelMetric):
        return ProportionStatistic(n, row.sum)
    numerator = MeanStatistic(n, row.sum, row.sum_squares)
    if isinstance(metric, MeanMetric):
        return numerator
    denominator = MeanStatistic(n, row.denominator_sum or 0.0, row.denominator_sum_squares or 0.0)
    return RatioStatistic(n, numerator, denominator, row.numerator_denominator_sum_product or 0.0)


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


def _compare(
    metric: Metric,
    method: Literal["bayesian", "frequentist"],
    result: VariantResult,
    row: VariantStatistics,
    control: Statistic | None,
) -> None:
    result.method = method
    if control is None or result.validation_failures:
        return
    try:
        treatment = _statistic(metric, row)
        if method == "bayesian":
            comparison = bayesian(treatment, control)
            result.chance_to_win = comparison.chance_to_win
            result.credible_interval = comparison.credible_interval
        else:
            outcome = frequentist(treatment, control)
            result.p_value = outcome.p_value
            result.confidence_interval = outcome.confidence_interval
            comparison = outcome  # type: ignore[assignment]
        result.effect = comparison.effect
        result.significant = comparison.significant
    except StatisticError as error:
        result.error = str(error)


def _metric_result(
    metric: Metric,
    rows: list[VariantStatistics],
    method: Literal["bayesian", "frequentist"],
    holdouts: set[str],
) -> MetricResult:
    by_key = {row.key: row for row in rows}
    control_row = by_key.get(CONTROL_VARIANT_KEY) or VariantStatistics(
        key=CONTROL_VARIANT_KEY, number_of_samples=0, sum=0.0, sum_squares=0.0
    )
    baseline = _variant(metric, control_row, baseline=True)
    control = None if baseline.validation_failures else _statistic(metric, control_row)
    variants: list[VariantResult] = []
    held: list[VariantResult] = []
    for row in rows:
        if row.key == CONTROL_VARIANT_KEY:
            continue
        result = _variant(metric, row, baseline=False)
        _compare(metric, method, result, row, control)
        (held if row.key in holdouts else variants).append(result)
    return MetricResult(
        uuid=metric.uuid,
        name=metric.name,
        metric_type=metric.__struct_config__.tag,  # type: ignore[arg-type]
        goal=metric.goal,
        baseline=baseline,
        variant_results=variants,
        holdout_results=held,
    )


def build_results(
    definition: ExperimentDefinition, summary: ExperimentSummary
) -> ExperimentResults:
    """The results response for one experiment from its per-variant sufficient statistics."""
    method = definition.stats_config.method
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

    def results_of(metrics: list[Metric]) -> list[MetricResult]:
        return [
            _metric_result(metric, summary.metrics.get(metric.uuid, []), method, holdouts)
            for metric in metrics
        ]

    return ExperimentResults(
        stats_method=method,
        exposures=exposures,
        holdout_exposures=holdout_exposures,
        multiple_variant_persons=summary.multiple_variant_persons,
        sample_ratio_mismatch=srm,
        warnings=warnings,
        metrics=results_of(definition.metrics),
        metrics_secondary=results_of(definition.metrics_secondary),
    )


def to_json(results: ExperimentResults) -> dict[str, Any]:
    """Plain JSON-ready data (tuples become lists)."""
    return msgspec.to_builtins(results)
