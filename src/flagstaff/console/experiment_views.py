"""What the experiment pages show, built from stored experiments and the results endpoint's
JSON (``application/experiments.results_json`` of ``experiment_results``): every figure on
the page is one of that response's, only formatted here. Pure: no I/O."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal

import msgspec
from markupsafe import Markup

from flagstaff.application.flag_usage import day_label
from flagstaff.common.clock import minute_text
from flagstaff.common.units import DAY_MS
from flagstaff.console import experiment_charts
from flagstaff.console.experiment_charts import Delta, percent
from flagstaff.experiments.model import ExperimentDefinition
from flagstaff.store.experiment_batch import ExperimentRecord

Status = Literal["draft", "running", "complete", "archived"]
METRIC_TYPE_LABELS = {"funnel": "Funnel", "mean": "Mean", "ratio": "Ratio"}


def status_of(record: ExperimentRecord, now: datetime) -> Status:
    definition = record.definition
    if record.archived or definition.archived:
        return "archived"
    if definition.start_date is None:
        return "draft"
    if definition.end_date is not None and definition.end_date <= now:
        return "complete"
    return "running"


class ExperimentRow(msgspec.Struct, frozen=True):
    id: int
    name: str
    status: Status
    flag_key: str
    flag_id: int
    start: str
    end: str
    exposed: int
    """Exposed persons, all variants (holdouts apart), as the results count them."""


def experiment_row(
    record: ExperimentRecord, exposures: dict[str, int], now: datetime
) -> ExperimentRow:
    definition = record.definition
    return ExperimentRow(
        id=record.id,
        name=definition.name,
        status=status_of(record, now),
        flag_key=definition.feature_flag_key,
        flag_id=record.feature_flag_id,
        start=minute_text(definition.start_date),
        end=minute_text(definition.end_date),
        exposed=sum(exposures.values()),
    )


class VariantLine(msgspec.Struct, frozen=True):
    """One row of a metric's table: a variant's figures from the results response."""

    key: str
    control: bool
    holdout: bool
    exposures: int
    value: str
    chance_to_win: str
    p_value: str
    interval: str
    significance: str
    significant: bool
    p_value_adjusted: str = ""
    cuped: str = ""
    """CUPED's variance reduction (e.g. "38% less variance")."""
    guardrail: str = ""
    """On a guardrail metric: "Harmed" or "Clear"."""


class MetricView(msgspec.Struct, frozen=True):
    uuid: str
    title: str
    metric_type: str
    goal: str
    rows: list[VariantLine]
    chart: Markup | None
    """The delta bars; None while no variant has an interval (too few samples)."""
    too_few: bool


def _value(metric_type: str, mean: float | None) -> str:
    if mean is None:
        return "-"
    if metric_type == "funnel":
        return f"{mean * 100:.1f}%"
    return f"{mean:,.3f}" if metric_type == "ratio" else f"{mean:,.2f}"


def _significance(result: dict[str, Any], goal: str) -> tuple[str, bool]:
    failures = result.get("validation_failures") or []
    if failures:
        return "Too few samples (" + ", ".join(failures) + ")", False
    if result.get("error"):
        return f"No statistics: {result['error']}", False
    if result.get("significant") is None:
        return "-", False
    if not result["significant"]:
        return "Not significant", False
    effect = float(result.get("effect") or 0.0)
    better = effect > 0 if goal == "increase" else effect < 0
    return ("Significant: better" if better else "Significant: worse"), True


def _line(
    result: dict[str, Any], metric_type: str, goal: str, *, control: bool, holdout: bool
) -> VariantLine:
    chance = result.get("chance_to_win")
    if chance is not None and goal == "decrease":
        chance = 1 - chance  # the API's P(variant > control); a decrease goal wins below it
    interval = result.get("credible_interval") or result.get("confidence_interval")
    p_value = result.get("p_value")
    adjusted = result.get("p_value_adjusted")
    reduction = result.get("cuped_variance_reduction")
    state = result.get("guardrail_state")
    significance, significant = ("Baseline", False) if control else _significance(result, goal)
    return VariantLine(
        p_value_adjusted=f"{adjusted:.4f}" if adjusted is not None else "",
        cuped=f"{reduction * 100:.0f}% less variance" if reduction is not None else "",
        guardrail={"breached": "Harmed", "clear": "Clear"}.get(state or "", ""),
        key=str(result["key"]),
        control=control,
        holdout=holdout,
        exposures=int(result["number_of_samples"]),
        value=_value(metric_type, result.get("mean")),
        chance_to_win=f"{chance * 100:.1f}%" if chance is not None else "",
        p_value=f"{p_value:.4f}" if p_value is not None else "",
        interval=f"{percent(interval[0])} to {percent(interval[1])}" if interval else "",
        significance=significance,
        significant=significant,
    )


CORRECTION_LABELS = {
    "holm": "Holm-Bonferroni",
    "benjamini_hochberg": "Benjamini-Hochberg",
}


def inference(applied: dict[str, Any]) -> str:
    """The inference in use, in one line (the results' ``stats_config_applied``)."""
    if applied["method"] == "bayesian":
        parts = ["Bayesian (chance to win, 95% credible interval)"]
    elif applied["sequential"]:
        parts = [
            f"Frequentist, sequential: always-valid p-values and intervals at alpha "
            f"{applied['alpha']:g}, safe to read any day"
        ]
    else:
        parts = [f"Frequentist, fixed horizon at alpha {applied['alpha']:g}: read once, at the end"]
    if applied["cuped"]:
        parts.append(f"CUPED over {applied['cuped_lookback_days']} days before exposure")
    correction = CORRECTION_LABELS.get(applied["multiple_testing_correction"])
    if correction:
        parts.append(f"{correction} correction across metrics and variants")
    if applied["auto_stop"]:
        parts.append("auto-stop on a harmed guardrail")
    return "; ".join(parts) + "."


def metric_view(position: int, metric: dict[str, Any], secondary: bool | str = False) -> MetricView:
    """One metric of the results response: its table and its delta chart (``secondary``: a
    secondary metric, or the id prefix of another section's charts, e.g. ``guardrail-``)."""
    metric_type, goal = str(metric["metric_type"]), str(metric["goal"])
    title = metric.get("name") or f"{METRIC_TYPE_LABELS.get(metric_type, metric_type)} metric"
    rows = [_line(metric["baseline"], metric_type, goal, control=True, holdout=False)]
    deltas: list[Delta] = []
    for result in metric["variant_results"]:
        rows.append(_line(result, metric_type, goal, control=False, holdout=False))
        interval = result.get("credible_interval") or result.get("confidence_interval")
        if interval and result.get("effect") is not None:
            effect = float(result["effect"])
            deltas.append(
                Delta(
                    key=str(result["key"]),
                    effect=effect,
                    low=float(interval[0]),
                    high=float(interval[1]),
                    significant=bool(result.get("significant")),
                    better=effect > 0 if goal == "increase" else effect < 0,
                )
            )
    for result in metric.get("holdout_results") or []:
        rows.append(_line(result, metric_type, goal, control=False, holdout=True))
    prefix = secondary if isinstance(secondary, str) else ("secondary-" if secondary else "")
    chart = (
        experiment_charts.delta_bars(
            f"delta-{prefix}{position}", f"{title}: each variant against control", deltas
        )
        if deltas
        else None
    )
    return MetricView(
        uuid=str(metric["uuid"]),
        title=str(title),
        metric_type=metric_type,
        goal=goal,
        rows=rows,
        chart=chart,
        too_few=not deltas,
    )


def exposure_days_span(
    days: dict[str, dict[int, int]], start_ms: int, end_ms: int | None, now_ms: int
) -> range:
    """The days the chart covers: from the day before the start date (nobody exposed yet:
    each line rises from zero) to today (or the end date, if earlier), widened to any day
    with exposures (a clock or an event time off)."""
    first = start_ms // DAY_MS - 1
    last = max(first + 1, (now_ms if end_ms is None else min(end_ms, now_ms)) // DAY_MS)
    seen = [day for counts in days.values() for day in counts]
    if seen:
        first, last = min(first, *seen), max(last, *seen)
    return range(first, last + 1)


def cumulative(counts: dict[int, int], span: range) -> list[int]:
    """Persons exposed up to and including each day of ``span`` (days before it count on
    its first day)."""
    running = sum(n for day, n in counts.items() if day < span.start)
    out = []
    for day in span:
        running += counts.get(day, 0)
        out.append(running)
    return out


MAX_POINTS = 120
"""A longer span is drawn every few days (counted back from its last day, which is always
drawn): the page's cost stays bounded however long an experiment has run."""


def exposure_chart(days: dict[str, dict[int, int]], span: range) -> Markup:
    """Unique persons exposed per variant, cumulative by the day of their first exposure
    (the totals' day histograms: the last point of a line is the variant's exposures)."""
    step = math.ceil(len(span) / MAX_POINTS)
    shown = span[::-1][::step][::-1]
    picked = range(len(span))[::-1][::step][::-1]
    series = []
    for key, counts in days.items():
        running = cumulative(counts, span)
        series.append((key, [running[i] for i in picked] if step > 1 else running))
    totals = ", ".join(f"{key} {counts[-1] if counts else 0:,}" for key, counts in series)
    n = len(shown)
    every = "" if step == 1 else f", drawn every {step} days"
    return experiment_charts.lines(
        "exposures-over-time",
        "Unique persons exposed per variant, cumulative by day",
        f"Persons exposed by their first exposure's day (UTC), cumulative{every}: {totals}.",
        [day_label(d) for d in shown],
        series,
        y_title="Persons exposed",
        tick_every=1
        if n <= 10
        else (7 if step == 1 else 1) * math.ceil(n / (56 if step == 1 else 8)),
        changes_only=True,
    )


def form_metrics(definition: ExperimentDefinition | None) -> list[Any]:
    """The metrics as JSON for the metric builder (``static/experiments.js``)."""
    if definition is None:
        return []
    return list(msgspec.to_builtins(definition.metrics))


CONSOLE_STATS_DEFAULTS: dict[str, Any] = {
    "method": "frequentist",
    "sequential": True,
    "cuped": True,
    "cuped_lookback_days": 14,
    "multiple_testing_correction": "holm",
    "auto_stop": False,
}
"""What the console's new-experiment form starts with (the API's defaults are PostHog's):
always-valid results, CUPED over 14 days and Holm's correction."""


def form_stats_defaults(project_defaults: dict[str, Any]) -> dict[str, Any]:
    """The form's starting choices: the console's, then the project's settings over them."""
    return {**CONSOLE_STATS_DEFAULTS, **project_defaults}
