"""Experiment definitions: PostHog's shapes, validation with field paths, the created flag."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from flagstaff.experiments.model import (
    ExperimentInvalid,
    FunnelMetric,
    MeanMetric,
    RatioMetric,
    apply_patch,
    experiment_flag,
    link_existing_flag,
    parse_experiment,
    parse_holdout,
)
from flagstaff.flags.validation import validate_flag

# A create request as PostHog's UI and API send it (extra fields such as "filters",
# "saved_metrics_ids" and "type" are accepted and ignored).
POSTHOG_REQUEST: dict[str, Any] = {
    "name": "New checkout",
    "description": "Does the one-page checkout sell more?",
    "feature_flag_key": "new-checkout",
    "type": "product",
    "filters": {},
    "saved_metrics_ids": [],
    "parameters": {
        "feature_flag_variants": [
            {"key": "control", "name": "Control Group", "rollout_percentage": 34},
            {"key": "one-page", "rollout_percentage": 33},
            {"key": "two-page", "rollout_percentage": 33},
        ],
        "minimum_detectable_effect": 5,
    },
    "holdout_id": 4,
    "stats_config": {"method": "frequentist"},
    "exposure_criteria": {"filterTestAccounts": False},
    "metrics": [
        {
            "kind": "ExperimentMetric",
            "metric_type": "funnel",
            "uuid": "0b1c",
            "name": "Checkout conversion",
            "series": [
                {"kind": "EventsNode", "event": "checkout_started"},
                {
                    "kind": "EventsNode",
                    "event": "purchase",
                    "properties": [{"key": "amount", "value": 0, "operator": "gt"}],
                },
            ],
        },
        {
            "kind": "ExperimentMetric",
            "metric_type": "mean",
            "uuid": "3d4e",
            "source": {
                "kind": "EventsNode",
                "event": "purchase",
                "math": "sum",
                "math_property": "amount",
            },
        },
    ],
    "metrics_secondary": [
        {
            "kind": "ExperimentMetric",
            "metric_type": "ratio",
            "numerator": {
                "kind": "EventsNode",
                "event": "purchase",
                "math": "sum",
                "math_property": "amount",
            },
            "denominator": {"kind": "EventsNode", "event": "$pageview"},
        }
    ],
    "start_date": "2024-03-01T09:00:00",
    "end_date": None,
}


def errors_of(data: Any) -> list[tuple[str, str]]:
    with pytest.raises(ExperimentInvalid) as caught:
        parse_experiment(data)
    return caught.value.errors


def test_posthog_request_parses() -> None:
    definition = parse_experiment(POSTHOG_REQUEST)
    assert definition.stats_config.method == "frequentist"
    assert definition.holdout_id == 4
    assert [variant.key for variant in definition.variants] == ["control", "one-page", "two-page"]
    assert isinstance(definition.metrics[0], FunnelMetric)
    assert isinstance(definition.metrics[1], MeanMetric)
    assert isinstance(definition.metrics_secondary[0], RatioMetric)
    assert definition.metrics_secondary[0].uuid  # a uuid is given when missing
    assert definition.start_date == datetime(2024, 3, 1, 9, tzinfo=UTC)
    assert definition.exposure_criteria.multiple_variant_handling == "exclude"
    encoded = msgspec.to_builtins(definition)
    assert encoded["metrics"][1]["kind"] == "ExperimentMetric"
    assert encoded["metrics"][1]["source"]["kind"] == "EventsNode"
    assert parse_experiment(encoded) == definition  # what we return, we accept back


def test_defaults_are_posthogs() -> None:
    definition = parse_experiment({"name": "A", "feature_flag_key": "a"})
    assert definition.stats_config.method == "bayesian"
    assert definition.exposure_criteria.filterTestAccounts is True
    assert [(v.key, v.rollout_percentage) for v in definition.variants] == [
        ("control", 50),
        ("test", 50),
    ]
    assert definition.metrics == [] and definition.metrics_secondary == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"name": ""}, ("name", "This field is required.")),
        ({"name": 5}, ("name", "Expected `str`, got `int`")),
        ({"feature_flag_key": "has space"}, ("feature_flag_key", "Only letters")),
        ({"stats_config": {"method": "sequential"}}, ("stats_config.method", "Invalid value")),
        (
            {"stats_config": {"sequential_tuning_parameter": 0}},
            ("stats_config.sequential_tuning_parameter", "Must be a positive number"),
        ),
        (
            {"stats_config": {"sequential": "yes"}},
            ("stats_config.sequential", "Expected `bool | null`, got `str`"),
        ),
        (
            {"stats_config": {"multiple_testing_correction": "bonferroni"}},
            ("stats_config.multiple_testing_correction", "Invalid value 'bonferroni'"),
        ),
        (
            {"stats_config": {"cuped_lookback_days": 0}},
            ("stats_config.cuped_lookback_days", "Must be between 1 and 180."),
        ),
        (
            {"stats_config": {"minimum_detectable_effect": 5}},
            ("stats_config.minimum_detectable_effect", "Must be a relative effect"),
        ),
        (
            {"stats_config": {"frequentist": {"alpha": 0.9}}},
            ("stats_config.frequentist.alpha", "Must be between 0 and 0.5"),
        ),
        (
            {"metrics_guardrail": [{"metric_type": "funnel", "series": []}]},
            ("metrics_guardrail[0].series", "A funnel needs at least one step."),
        ),
        (
            {"metrics": [{"metric_type": "retention", "series": []}]},
            ("metrics[0].metric_type", "Invalid value 'retention'"),
        ),
        (
            {"metrics": [{"metric_type": "mean", "source": {"event": "e", "math": "avg"}}]},
            ("metrics[0].source.math_property", "Required when math is 'avg'."),
        ),
        (
            {"metrics": [{"metric_type": "mean", "source": {"event": "e", "math": "dau"}}]},
            ("metrics[0].source.math", "Invalid value 'dau'"),
        ),
        (
            {"metrics": [{"metric_type": "funnel", "series": []}]},
            ("metrics[0].series", "A funnel needs at least one step."),
        ),
        (
            {
                "metrics_secondary": [
                    {
                        "metric_type": "mean",
                        "source": {
                            "event": "e",
                            "properties": [{"key": "k", "value": 1, "operator": "near"}],
                        },
                    }
                ]
            },
            ("metrics_secondary[0].source.properties[0].operator", "Unknown operator 'near'."),
        ),
        (
            {
                "metrics": [
                    {"uuid": "same", "metric_type": "mean", "source": {"event": "a"}},
                ],
                "metrics_secondary": [
                    {"uuid": "same", "metric_type": "mean", "source": {"event": "b"}},
                ],
            },
            ("metrics_secondary[0].uuid", "Duplicate metric uuid 'same'."),
        ),
        (
            {
                "parameters": {
                    "feature_flag_variants": [{"key": "control", "rollout_percentage": 100}]
                }
            },
            ("parameters.feature_flag_variants", "at least one test variant"),
        ),
        (
            {
                "parameters": {
                    "feature_flag_variants": [
                        {"key": "a", "rollout_percentage": 50},
                        {"key": "b", "rollout_percentage": 50},
                    ]
                }
            },
            ("parameters.feature_flag_variants", "with key 'control'"),
        ),
        (
            {
                "parameters": {
                    "feature_flag_variants": [
                        {"key": "control", "rollout_percentage": 60},
                        {"key": "test", "rollout_percentage": 30},
                    ]
                }
            },
            ("parameters.feature_flag_variants", "must sum to 100"),
        ),
        (
            {
                "parameters": {
                    "feature_flag_variants": [
                        {"key": "control", "rollout_percentage": 50},
                        {"key": "holdout-1", "rollout_percentage": 50},
                    ]
                }
            },
            ("parameters.feature_flag_variants[1].key", "reserved"),
        ),
        (
            {"start_date": "2024-02-01T00:00:00Z", "end_date": "2024-01-01T00:00:00Z"},
            ("end_date", "End date must be after start date."),
        ),
        (
            {"exposure_criteria": {"multiple_variant_handling": "last_seen"}},
            ("exposure_criteria.multiple_variant_handling", "Invalid value"),
        ),
    ],
)
def test_invalid_definitions_name_the_field(
    change: dict[str, Any], expected: tuple[str, str]
) -> None:
    data = {"name": "A", "feature_flag_key": "a", **change}
    errors = errors_of(data)
    path, fragment = expected
    assert any(p == path and fragment in message for p, message in errors), errors


def test_not_an_object() -> None:
    assert errors_of([1]) == [("", "Must be an object.")]


def test_created_flag_is_posthogs() -> None:
    definition = parse_experiment(POSTHOG_REQUEST)
    holdout = parse_holdout(
        {"name": "10% out", "filters": [{"properties": [], "rollout_percentage": 10}]}
    )
    flag = experiment_flag(definition, 4, holdout)
    assert flag == {
        "key": "new-checkout",
        "name": "Feature Flag for Experiment New checkout",
        "filters": {
            "groups": [{"properties": [], "rollout_percentage": 100}],
            "multivariate": {
                "variants": [
                    {"key": "control", "rollout_percentage": 34, "name": "Control Group"},
                    {"key": "one-page", "rollout_percentage": 33, "name": None},
                    {"key": "two-page", "rollout_percentage": 33, "name": None},
                ]
            },
            "aggregation_group_type_index": None,
            "holdout": {"id": 4, "exclusion_percentage": 10.0},
        },
        "active": True,
        "creation_context": "experiments",
    }
    assert validate_flag(flag) == []  # the flag engine accepts what we create
    draft = parse_experiment({"name": "Draft", "feature_flag_key": "d"})
    draft_flag = experiment_flag(draft)
    assert draft_flag["active"] is False
    assert draft_flag["filters"]["holdout"] is None
    assert [v["key"] for v in draft_flag["filters"]["multivariate"]["variants"]] == [
        "control",
        "test",
    ]
    assert validate_flag(draft_flag) == []


def test_holdout_validation() -> None:
    with pytest.raises(ExperimentInvalid) as caught:
        parse_holdout({"name": "h", "filters": [{"properties": [], "rollout_percentage": 120}]})
    assert caught.value.errors == [("filters[0].rollout_percentage", "Must be between 0 and 100.")]
    with pytest.raises(ExperimentInvalid) as caught:
        parse_holdout({"name": "h", "filters": []})
    assert caught.value.errors == [("filters", "A holdout needs one filter group.")]


def test_patch_replaces_fields_but_not_the_flag() -> None:
    stored = parse_experiment(POSTHOG_REQUEST)
    patched = apply_patch(stored, {"name": "Renamed", "end_date": "2024-04-01T00:00:00Z"})
    assert patched.name == "Renamed"
    assert patched.end_date == datetime(2024, 4, 1, tzinfo=UTC)
    assert patched.metrics == stored.metrics  # uuids kept
    with pytest.raises(ExperimentInvalid) as caught:
        apply_patch(stored, {"feature_flag_key": "other"})
    assert caught.value.errors[0][0] == "feature_flag_key"
    with pytest.raises(ExperimentInvalid) as caught:
        apply_patch(stored, {"end_date": "2024-01-01T00:00:00Z"})
    assert caught.value.errors == [("end_date", "End date must be after start date.")]


def test_linking_an_existing_flag_takes_its_variants() -> None:
    definition = parse_experiment({"name": "A", "feature_flag_key": "a"})
    filters = {
        "groups": [{"properties": [], "rollout_percentage": 100}],
        "multivariate": {
            "variants": [
                {"key": "control", "rollout_percentage": 20},
                {"key": "b", "rollout_percentage": 80},
            ]
        },
    }
    linked = link_existing_flag(definition, filters)
    assert [(v.key, v.rollout_percentage) for v in linked.variants] == [("control", 20), ("b", 80)]
    for bad, message in [
        ({"groups": []}, "Feature flag is not eligible for experiments."),
        (
            {
                "multivariate": {
                    "variants": [
                        {"key": "b", "rollout_percentage": 50},
                        {"key": "control", "rollout_percentage": 50},
                    ]
                }
            },
            "Feature flag must have control as the first variant.",
        ),
    ]:
        with pytest.raises(ExperimentInvalid) as caught:
            link_existing_flag(definition, bad)
        assert caught.value.errors == [("feature_flag_key", message)]


def test_at_most_twenty_variants() -> None:
    variants = [{"key": "control", "rollout_percentage": 5}] + [
        {"key": f"v{i}", "rollout_percentage": 5} for i in range(20)
    ]
    errors = errors_of(
        {"name": "A", "feature_flag_key": "a", "parameters": {"feature_flag_variants": variants}}
    )
    assert (
        "parameters.feature_flag_variants",
        "Feature flag variants must be less than 21.",
    ) in errors
