"""Experiment definitions in PostHog's shapes, their validation, and the flag they create.

An experiment (``ExperimentDefinition``) names a multivariate flag (``feature_flag_key``), its
variants and split (``parameters.feature_flag_variants``: ``key``, ``name``,
``rollout_percentage``), an optional holdout, a window (``start_date``, ``end_date``), the
statistics method (``stats_config.method``), optional exposure criteria, and metrics in
PostHog's ``ExperimentMetric`` form (``kind: "ExperimentMetric"``, ``metric_type`` ``funnel``,
``mean`` or ``ratio``, each with a ``uuid``). Fields PostHog sends that are not modelled here
(``filters``, ``saved_metrics_ids``, ``type``...) are ignored on input.

``parse_experiment`` turns request JSON into a definition or raises ``ExperimentInvalid`` with
``(field path, message)`` pairs, like the flag validation. ``experiment_flag`` is the flag
PostHog creates when ``feature_flag_key`` names no flag yet.
"""

from __future__ import annotations

import uuid as uuid_module
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import msgspec

from flagstaff.common import invalid
from flagstaff.common.invalid import DefinitionInvalid, Errors
from flagstaff.common.units import DAY_S
from flagstaff.flags.operators import PROPERTY_OPERATORS
from flagstaff.flags.validation import flag_key_problem

__all__ = [
    "CONTROL_VARIANT_KEY",
    "DEFAULT_VARIANTS",
    "EventsNode",
    "ExperimentDefinition",
    "ExperimentInvalid",
    "ExposureConfig",
    "ExposureCriteria",
    "FrequentistOptions",
    "FunnelMetric",
    "Holdout",
    "MeanMetric",
    "Metric",
    "Parameters",
    "PropertyFilter",
    "RatioMetric",
    "StatsApplied",
    "StatsConfig",
    "Variant",
    "applied_stats",
    "apply_patch",
    "check_experiment",
    "check_holdout",
    "conversion_problem",
    "convert_input",
    "experiment_flag",
    "flag_eligibility_problem",
    "holdout_flag_filters",
    "holdout_variant_key",
    "link_existing_flag",
    "parse_experiment",
    "parse_holdout",
    "parse_stats_defaults",
    "same_flag_problem",
]

CONTROL_VARIANT_KEY = "control"
DEFAULT_EXPOSURE_EVENT = "$feature_flag_called"
HOLDOUT_VARIANT_PREFIX = "holdout-"
MAX_NAME_LENGTH = 400
MAX_VARIANTS = 20
CONVERSION_WINDOW_SECONDS = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": DAY_S,
    "week": 7 * DAY_S,
    "month": 30 * DAY_S,
}
"""PostHog's ``FunnelConversionWindowTimeUnit`` values, in seconds (a month counts 30 days)."""


class ExperimentInvalid(DefinitionInvalid):
    """An experiment definition that cannot be accepted."""


class Variant(msgspec.Struct, kw_only=True):
    key: str
    rollout_percentage: float
    name: str | None = None


class Parameters(msgspec.Struct, kw_only=True):
    feature_flag_variants: list[Variant] = msgspec.field(default_factory=list)
    rollout_percentage: float | None = None
    """Share of all persons enrolled (the created flag's condition); 100 when absent."""
    aggregation_group_type_index: int | None = None
    ensure_experience_continuity: bool | None = None
    minimum_detectable_effect: float | None = None


class FrequentistOptions(msgspec.Struct, kw_only=True):
    """PostHog's ``stats_config.frequentist``: the significance level."""

    alpha: float | None = None


class StatsConfig(msgspec.Struct, kw_only=True):
    """How results are inferred. A field left out means what it means in PostHog (see
    ``applied_stats``); the API fills left-out fields from the project's defaults on create."""

    method: Literal["bayesian", "frequentist"] = "bayesian"
    frequentist: FrequentistOptions | None = None
    sequential: bool | None = None
    sequential_tuning_parameter: float | None = None
    cuped: bool | None = None
    cuped_lookback_days: int | None = None
    multiple_testing_correction: Literal["holm", "benjamini_hochberg", "none"] | None = None
    minimum_detectable_effect: float | None = None
    """Relative (0.05 is 5%); ``parameters.minimum_detectable_effect`` is PostHog's percent."""
    auto_stop: bool | None = None


class StatsApplied(msgspec.Struct, kw_only=True):
    """What the results applied: every ``StatsConfig`` field resolved."""

    method: Literal["bayesian", "frequentist"]
    alpha: float
    sequential: bool
    sequential_tuning_parameter: float
    cuped: bool
    cuped_lookback_days: int
    multiple_testing_correction: Literal["holm", "benjamini_hochberg", "none"]
    minimum_detectable_effect: float
    auto_stop: bool


DEFAULT_ALPHA = 0.05
DEFAULT_TUNING_PARAMETER = 5000.0
"""gbstats' and GrowthBook's default ``sequential_tuning_parameter``."""
DEFAULT_CUPED_LOOKBACK_DAYS = 14
DEFAULT_MINIMUM_DETECTABLE_EFFECT = 0.05
MAX_CUPED_LOOKBACK_DAYS = 180


def applied_stats(config: StatsConfig, parameters: Parameters | None = None) -> StatsApplied:
    """The settings in force. PostHog's meaning of a left-out field: no sequential testing,
    no CUPED, no correction, alpha 0.05. Sequential testing and corrections are frequentist:
    under the Bayesian method they are reported as not applied."""
    frequentist = config.method == "frequentist"
    mde = config.minimum_detectable_effect
    if mde is None and parameters is not None and parameters.minimum_detectable_effect:
        mde = parameters.minimum_detectable_effect / 100  # PostHog's is a percentage
    alpha = config.frequentist.alpha if config.frequentist is not None else None
    return StatsApplied(
        method=config.method,
        alpha=DEFAULT_ALPHA if alpha is None else alpha,
        sequential=frequentist and bool(config.sequential),
        sequential_tuning_parameter=config.sequential_tuning_parameter or DEFAULT_TUNING_PARAMETER,
        cuped=bool(config.cuped),
        cuped_lookback_days=config.cuped_lookback_days or DEFAULT_CUPED_LOOKBACK_DAYS,
        multiple_testing_correction=(config.multiple_testing_correction or "none")
        if frequentist
        else "none",
        minimum_detectable_effect=mde or DEFAULT_MINIMUM_DETECTABLE_EFFECT,
        auto_stop=bool(config.auto_stop),
    )


def parse_stats_defaults(data: Any) -> dict[str, Any]:
    """A project's defaults of ``stats_config`` (the fields given, validated as in an
    experiment; errors name ``experiment_stats_defaults.<field>``)."""
    if not isinstance(data, dict):
        raise ExperimentInvalid([("experiment_stats_defaults", "Must be an object.")])
    try:
        config = msgspec.convert(data, StatsConfig)
    except msgspec.ValidationError as error:
        path, message = conversion_problem(error)
        raise ExperimentInvalid(
            [(f"experiment_stats_defaults.{path}".rstrip("."), message)]
        ) from None
    errors: Errors = []
    _check_stats_config(config, errors)
    if errors:
        raise ExperimentInvalid(
            [
                (path.replace("stats_config", "experiment_stats_defaults", 1), m)
                for path, m in errors
            ]
        )
    given = msgspec.to_builtins(config)
    return {key: given[key] for key in data if given.get(key) is not None}


def _check_stats_config(config: StatsConfig, errors: Errors) -> None:
    path = "stats_config"
    alpha = config.frequentist.alpha if config.frequentist is not None else None
    if alpha is not None and not 0 < alpha < 0.5:
        errors.append((f"{path}.frequentist.alpha", "Must be between 0 and 0.5 (exclusive)."))
    tuning = config.sequential_tuning_parameter
    if tuning is not None and not 0 < tuning <= 1e9:
        errors.append(
            (
                f"{path}.sequential_tuning_parameter",
                "Must be a positive number of persons (at most 1e9): the sample size where "
                "the confidence sequence is tightest.",
            )
        )
    days = config.cuped_lookback_days
    if days is not None and not 1 <= days <= MAX_CUPED_LOOKBACK_DAYS:
        errors.append(
            (f"{path}.cuped_lookback_days", f"Must be between 1 and {MAX_CUPED_LOOKBACK_DAYS}.")
        )
    mde = config.minimum_detectable_effect
    if mde is not None and not 0 < mde <= 1:
        errors.append(
            (
                f"{path}.minimum_detectable_effect",
                "Must be a relative effect above 0 and at most 1 (0.05 is 5%).",
            )
        )


class PropertyFilter(msgspec.Struct, kw_only=True):
    """An event property filter as PostHog writes it (``type: "event"``)."""

    key: str
    value: Any = None
    operator: str = "exact"
    type: Literal["event"] = "event"


class EventsNode(msgspec.Struct, kw_only=True):
    """One event source: the event, its property filters, and how a person's events add up:
    ``total`` counts them, ``sum`` adds ``math_property``, ``avg`` averages it."""

    event: str
    kind: Literal["EventsNode"] = "EventsNode"
    name: str | None = None
    math: Literal["total", "sum", "avg"] = "total"
    math_property: str | None = None
    properties: list[PropertyFilter] = msgspec.field(default_factory=list)


class _MetricBase(msgspec.Struct, kw_only=True):
    uuid: str = ""
    kind: Literal["ExperimentMetric"] = "ExperimentMetric"
    name: str | None = None
    goal: Literal["increase", "decrease"] = "increase"
    conversion_window: int | None = None
    conversion_window_unit: Literal["second", "minute", "hour", "day", "week", "month"] | None = (
        None
    )

    def window_seconds(self) -> float | None:
        """Time after exposure within which metric events count; None when unbounded."""
        if self.conversion_window is None:
            return None
        return float(
            self.conversion_window * CONVERSION_WINDOW_SECONDS[self.conversion_window_unit or "day"]
        )


class FunnelMetric(_MetricBase, kw_only=True, tag_field="metric_type", tag="funnel"):
    """Conversion through ordered steps after exposure (the exposure is the implicit first)."""

    series: list[EventsNode]
    funnel_order_type: Literal["ordered"] = "ordered"


class MeanMetric(_MetricBase, kw_only=True, tag_field="metric_type", tag="mean"):
    """A per-person value from one source: a count, a sum or an average of a property."""

    source: EventsNode


class RatioMetric(_MetricBase, kw_only=True, tag_field="metric_type", tag="ratio"):
    """Sum of one source's per-person values over another's (the delta method's ratio)."""

    numerator: EventsNode
    denominator: EventsNode


Metric = FunnelMetric | MeanMetric | RatioMetric


class ExposureConfig(msgspec.Struct, kw_only=True):
    """A custom exposure event: the variant is read from ``$feature/<flag key>``."""

    event: str
    kind: Literal["ExperimentEventExposureConfig"] = "ExperimentEventExposureConfig"
    properties: list[PropertyFilter] = msgspec.field(default_factory=list)


class ExposureCriteria(msgspec.Struct, kw_only=True):
    exposure_config: ExposureConfig | None = None
    filterTestAccounts: bool = True
    multiple_variant_handling: Literal["exclude", "first_seen"] = "exclude"


class ExperimentDefinition(msgspec.Struct, kw_only=True):
    """What a client can set on an experiment (the store adds id, flag id, timestamps)."""

    name: str
    feature_flag_key: str
    description: str = ""
    parameters: Parameters = msgspec.field(default_factory=Parameters)
    holdout_id: int | None = None
    start_date: datetime | None = None
    end_date: datetime | None = None
    archived: bool = False
    stats_config: StatsConfig = msgspec.field(default_factory=StatsConfig)
    exposure_criteria: ExposureCriteria = msgspec.field(default_factory=ExposureCriteria)
    metrics: list[Metric] = msgspec.field(default_factory=list)
    metrics_secondary: list[Metric] = msgspec.field(default_factory=list)
    metrics_guardrail: list[Metric] = msgspec.field(default_factory=list)
    """Metrics that must not get worse (each ``goal`` the good direction): judged with
    always-valid tests at the experiment's alpha, whatever the method."""
    conclusion: str | None = None
    conclusion_comment: str | None = None

    @property
    def variants(self) -> list[Variant]:
        """The configured variants, or PostHog's default 50/50 control and test."""
        return self.parameters.feature_flag_variants or list(DEFAULT_VARIANTS)


DEFAULT_VARIANTS = (
    Variant(key=CONTROL_VARIANT_KEY, name="Control Group", rollout_percentage=50),
    Variant(key="test", name="Test Variant", rollout_percentage=50),
)
"""The variants PostHog gives a new experiment flag when none are sent."""


class Holdout(msgspec.Struct, kw_only=True):
    """An experiment holdout: ``filters[0].rollout_percentage`` of persons are held out."""

    name: str
    filters: list[dict[str, Any]]
    description: str | None = None

    @property
    def exclusion_percentage(self) -> float:
        return float(self.filters[0]["rollout_percentage"])


def holdout_variant_key(holdout_id: int) -> str:
    """The variant the flag engine serves to held-out persons (``holdout-<id>``)."""
    return f"{HOLDOUT_VARIANT_PREFIX}{holdout_id}"


def holdout_flag_filters(holdout_id: int | None, holdout: Holdout | None) -> dict[str, Any]:
    """The ``holdout`` entry PostHog writes into a flag's filters (None clears it)."""
    if holdout_id is None or holdout is None:
        return {"holdout": None}
    return {"holdout": {"id": holdout_id, "exclusion_percentage": holdout.exclusion_percentage}}


def experiment_flag(
    definition: ExperimentDefinition, holdout_id: int | None = None, holdout: Holdout | None = None
) -> dict[str, Any]:
    """The flag PostHog creates for a new experiment: key, name, filters, active.

    One condition for everyone at ``parameters.rollout_percentage`` (100 by default), the
    variants (control and test 50/50 by default), the aggregation group, and the holdout;
    active only once the experiment has started (a draft's flag is inactive).
    """
    parameters = definition.parameters
    filters: dict[str, Any] = {
        "groups": [
            {
                "properties": [],
                "rollout_percentage": 100
                if parameters.rollout_percentage is None
                else parameters.rollout_percentage,
            }
        ],
        "multivariate": {"variants": msgspec.to_builtins(definition.variants)},
        "aggregation_group_type_index": parameters.aggregation_group_type_index,
        **holdout_flag_filters(holdout_id, holdout),
    }
    flag: dict[str, Any] = {
        "key": definition.feature_flag_key,
        "name": f"Feature Flag for Experiment {definition.name}",
        "filters": filters,
        "active": definition.start_date is not None,
        "creation_context": "experiments",
    }
    if parameters.ensure_experience_continuity is not None:
        flag["ensure_experience_continuity"] = parameters.ensure_experience_continuity
    return flag


def conversion_problem(error: msgspec.ValidationError) -> tuple[str, str]:
    """A refused conversion as ``(field path, message)``: the experiment API's wording."""
    problem = invalid.conversion_problem(error)
    if problem.missing:  # name the missing field itself
        return problem.path, "This field is required."
    return problem.path, problem.message.replace("Invalid enum value", "Invalid value")


T = TypeVar("T")


def convert_input(kind: type[T], data: Any) -> T:
    """``data`` (decoded JSON, an object) as ``kind``, or :class:`ExperimentInvalid` naming the
    field in the experiment API's words (``This field is required.``, msgspec's type errors)."""
    if not isinstance(data, dict):
        raise ExperimentInvalid([("", "Must be an object.")])
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as error:
        raise ExperimentInvalid([conversion_problem(error)]) from None


def _check_node(path: str, node: EventsNode, errors: Errors) -> None:
    if not node.event:
        errors.append((f"{path}.event", "This field is required."))
    if node.math in ("sum", "avg") and not node.math_property:
        errors.append((f"{path}.math_property", f"Required when math is {node.math!r}."))
    _check_properties(f"{path}.properties", node.properties, errors)


def _check_properties(path: str, properties: list[PropertyFilter], errors: Errors) -> None:
    for position, prop in enumerate(properties):
        if prop.operator not in PROPERTY_OPERATORS:
            errors.append((f"{path}[{position}].operator", f"Unknown operator {prop.operator!r}."))
        elif prop.value is None and prop.operator not in ("is_set", "is_not_set"):
            errors.append((f"{path}[{position}].value", "This field is required."))


def _check_metrics(path: str, metrics: list[Metric], seen: set[str], errors: Errors) -> None:
    for position, metric in enumerate(metrics):
        metric_path = f"{path}[{position}]"
        if not metric.uuid:
            metric.uuid = str(uuid_module.uuid4())
        elif metric.uuid in seen:
            errors.append((f"{metric_path}.uuid", f"Duplicate metric uuid {metric.uuid!r}."))
        seen.add(metric.uuid)
        if metric.conversion_window is not None and metric.conversion_window <= 0:
            errors.append((f"{metric_path}.conversion_window", "Must be a positive integer."))
        if isinstance(metric, FunnelMetric):
            if not metric.series:
                errors.append((f"{metric_path}.series", "A funnel needs at least one step."))
            for step, node in enumerate(metric.series):
                _check_node(f"{metric_path}.series[{step}]", node, errors)
        elif isinstance(metric, MeanMetric):
            _check_node(f"{metric_path}.source", metric.source, errors)
        else:
            _check_node(f"{metric_path}.numerator", metric.numerator, errors)
            _check_node(f"{metric_path}.denominator", metric.denominator, errors)


def _check_variants(variants: list[Variant], errors: Errors) -> None:
    path = "parameters.feature_flag_variants"
    if not variants:
        return
    keys: set[str] = set()
    total = 0.0
    for position, variant in enumerate(variants):
        if not variant.key:
            errors.append((f"{path}[{position}].key", "This field is required."))
        elif variant.key in keys:
            errors.append((f"{path}[{position}].key", f"Duplicate variant key {variant.key!r}."))
        elif variant.key.startswith(HOLDOUT_VARIANT_PREFIX):
            errors.append((f"{path}[{position}].key", "The holdout- prefix is reserved."))
        keys.add(variant.key)
        if not 0 <= variant.rollout_percentage <= 100:
            errors.append((f"{path}[{position}].rollout_percentage", "Must be between 0 and 100."))
        total += variant.rollout_percentage
    if CONTROL_VARIANT_KEY not in keys:
        errors.append((path, "An experiment needs a variant with key 'control'."))
    if len(keys) < 2:
        errors.append((path, "An experiment needs at least one test variant besides control."))
    if abs(total - 100.0) > 1e-9:
        errors.append((path, "Variant rollout percentages must sum to 100."))
    if len(variants) > MAX_VARIANTS:
        errors.append((path, f"Feature flag variants must be less than {MAX_VARIANTS + 1}."))


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def parse_experiment(data: Any) -> ExperimentDefinition:
    """A validated definition from request JSON (a whole object: merge a PATCH first).

    Metrics without a ``uuid`` get a new one; naive dates are taken as UTC.
    """
    if not isinstance(data, dict):
        raise ExperimentInvalid([("", "Must be an object.")])
    if "holdout_id" not in data and isinstance(data.get("holdout"), int | None):
        data = {**data, "holdout_id": data.get("holdout")}
    for field in ("metrics", "metrics_secondary", "metrics_guardrail"):
        if data.get(field) is None and field in data:
            data = {**data, field: []}
    definition = convert_input(ExperimentDefinition, data)
    check_experiment(definition)
    return definition


def check_experiment(definition: ExperimentDefinition) -> None:
    """The rules a typed definition must follow besides its types (names, the flag key,
    variants, dates, metrics, statistics), every problem named by its field path.

    Metrics without a ``uuid`` get a new one; naive dates are taken as UTC."""
    errors: Errors = []
    if not definition.name.strip():
        errors.append(("name", "This field is required."))
    elif len(definition.name) > MAX_NAME_LENGTH:
        errors.append(("name", f"Ensure this field has no more than {MAX_NAME_LENGTH} characters."))
    key_problem = flag_key_problem(definition.feature_flag_key)
    if key_problem is not None:
        errors.append(("feature_flag_key", key_problem))
    _check_variants(definition.parameters.feature_flag_variants, errors)
    rollout = definition.parameters.rollout_percentage
    if rollout is not None and not 0 <= rollout <= 100:
        errors.append(("parameters.rollout_percentage", "Must be between 0 and 100."))
    definition.start_date = _utc(definition.start_date)
    definition.end_date = _utc(definition.end_date)
    if (
        definition.start_date is not None
        and definition.end_date is not None
        and definition.start_date >= definition.end_date
    ):
        errors.append(("end_date", "End date must be after start date."))
    config = definition.exposure_criteria.exposure_config
    if config is not None:
        if not config.event:
            errors.append(("exposure_criteria.exposure_config.event", "This field is required."))
        _check_properties("exposure_criteria.exposure_config.properties", config.properties, errors)
    seen: set[str] = set()
    _check_metrics("metrics", definition.metrics, seen, errors)
    _check_metrics("metrics_secondary", definition.metrics_secondary, seen, errors)
    _check_metrics("metrics_guardrail", definition.metrics_guardrail, seen, errors)
    _check_stats_config(definition.stats_config, errors)
    if errors:
        raise ExperimentInvalid(errors)


def parse_holdout(data: Any) -> Holdout:
    """A validated holdout: a name and ``filters`` ``[{"properties": [],
    "rollout_percentage": N}]`` (the store adds ``"variant": "holdout-<id>"`` once it has an id).
    """
    holdout = convert_input(Holdout, data)
    check_holdout(holdout)
    return holdout


def check_holdout(holdout: Holdout) -> None:
    """A holdout's rules besides its types: a name, and one filter group of a percentage."""
    errors: Errors = []
    if not holdout.name.strip():
        errors.append(("name", "This field is required."))
    if not holdout.filters:
        errors.append(("filters", "A holdout needs one filter group."))
    else:
        first = holdout.filters[0]
        if not isinstance(first, dict):
            errors.append(("filters[0]", "Must be an object."))
        else:
            if first.get("properties"):
                errors.append(("filters[0].properties", "Holdouts do not support properties."))
            percentage = first.get("rollout_percentage")
            if isinstance(percentage, bool) or not isinstance(percentage, int | float):
                errors.append(("filters[0].rollout_percentage", "Must be a number."))
            elif not 0 <= percentage <= 100:
                errors.append(("filters[0].rollout_percentage", "Must be between 0 and 100."))
    if errors:
        raise ExperimentInvalid(errors)


def apply_patch(stored: ExperimentDefinition, patch: Any) -> ExperimentDefinition:
    """The definition after a PATCH (top-level fields replace stored ones, as in PostHog).

    The flag key cannot change once the experiment exists.
    """
    if not isinstance(patch, dict):
        raise ExperimentInvalid([("", "Must be an object.")])
    problem = same_flag_problem(stored, patch.get("feature_flag_key", stored.feature_flag_key))
    if problem is not None:
        raise ExperimentInvalid([problem])
    merged = msgspec.to_builtins(stored)
    merged.update(patch)
    return parse_experiment(merged)


def same_flag_problem(stored: ExperimentDefinition, key: object) -> tuple[str, str] | None:
    """The flag of an existing experiment cannot change: the problem when ``key`` differs."""
    if key == stored.feature_flag_key:
        return None
    return ("feature_flag_key", "The flag of an existing experiment cannot change.")


def flag_eligibility_problem(flag_filters: dict[str, Any]) -> str | None:
    """Why a flag that exists already cannot carry an experiment (PostHog's rule: multivariate,
    ``control`` first, at least two variants); None when it can."""
    multivariate = flag_filters.get("multivariate") or {}
    variants = multivariate.get("variants") if isinstance(multivariate, dict) else None
    if not isinstance(variants, list) or len(variants) < 2:
        return "Feature flag is not eligible for experiments."
    if not isinstance(variants[0], dict) or variants[0].get("key") != CONTROL_VARIANT_KEY:
        return "Feature flag must have control as the first variant."
    return None


def link_existing_flag(
    definition: ExperimentDefinition, flag_filters: dict[str, Any]
) -> ExperimentDefinition:
    """An experiment on a flag that exists already: PostHog's eligibility rule (multivariate,
    ``control`` first, at least two variants), and the variants become the flag's."""
    problem = flag_eligibility_problem(flag_filters)
    if problem is not None:
        raise ExperimentInvalid([("feature_flag_key", problem)])
    try:
        linked = msgspec.convert(flag_filters["multivariate"]["variants"], list[Variant])
    except msgspec.ValidationError as error:
        _, message = conversion_problem(error)
        raise ExperimentInvalid(
            [("feature_flag_key", f"The flag's variants are not valid: {message}")]
        ) from None
    definition.parameters.feature_flag_variants = linked
    return definition
