"""validate_flag: field paths and messages for invalid definitions."""

from __future__ import annotations

from typing import Any

import pytest

from flagstaff.flags import validate_flag


def valid() -> dict[str, Any]:
    return {
        "key": "new-checkout_2",
        "name": "New checkout",
        "active": True,
        "evaluation_runtime": "all",
        "evaluation_contexts": ["web"],
        "filters": {
            "groups": [
                {
                    "properties": [
                        {"key": "email", "type": "person", "operator": "icontains", "value": "@"},
                        {"key": "id", "type": "cohort", "operator": "in", "value": 4},
                        {
                            "key": "7",
                            "type": "flag",
                            "operator": "flag_evaluates_to",
                            "value": True,
                        },
                        {"key": "v", "type": "person", "operator": "semver_caret", "value": "1.2"},
                        {"key": "n", "type": "person", "operator": "between", "value": [1, 5]},
                        {"key": "d", "type": "person", "operator": "is_date_after", "value": "-7d"},
                        {"key": "s", "type": "person", "operator": "is_set"},
                    ],
                    "rollout_percentage": 50,
                    "variant": "test",
                },
                {"properties": [], "rollout_percentage": None},
            ],
            "multivariate": {
                "variants": [
                    {"key": "control", "rollout_percentage": 50},
                    {"key": "test", "rollout_percentage": 50},
                ]
            },
            "payloads": {"control": '{"a": 1}', "test": {"b": 2}},
            "holdout": {"id": 3, "exclusion_percentage": 10},
        },
    }


def paths(definition: dict[str, Any]) -> list[str]:
    return [path for path, _ in validate_flag(definition)]


def test_valid_definition() -> None:
    assert validate_flag(valid()) == []


@pytest.mark.parametrize(
    ("mutate", "expected_path"),
    [
        (lambda d: d.update(key="has space"), "key"),
        (lambda d: d.update(key=""), "key"),
        (lambda d: d.update(key="k" * 401), "key"),
        (lambda d: d.update(key=5), "key"),
        (lambda d: d.update(active="yes"), "active"),
        (lambda d: d.update(name=3), "name"),
        (lambda d: d.update(evaluation_runtime="edge"), "evaluation_runtime"),
        (lambda d: d.update(evaluation_contexts="web"), "evaluation_contexts"),
        (lambda d: d.update(filters=[]), "filters"),
        (
            lambda d: d["filters"]["groups"][0].update(rollout_percentage=101),
            "filters.groups[0].rollout_percentage",
        ),
        (
            lambda d: d["filters"]["groups"][1].update(rollout_percentage=-1),
            "filters.groups[1].rollout_percentage",
        ),
        (
            lambda d: d["filters"]["groups"][0].update(rollout_percentage="50"),
            "filters.groups[0].rollout_percentage",
        ),
        (
            lambda d: d["filters"]["groups"][0]["properties"][0].update(operator="resembles"),
            "filters.groups[0].properties[0].operator",
        ),
        (
            lambda d: d["filters"]["groups"][0]["properties"][0].update(operator="gt", value={}),
            "filters.groups[0].properties[0].value",
        ),
        (
            lambda d: d["filters"]["groups"][0]["properties"][3].update(value=["1.2"]),
            "filters.groups[0].properties[3].value",
        ),
        (
            lambda d: d["filters"]["groups"][0]["properties"][0].update(
                operator="regex", value="(unclosed"
            ),
            "filters.groups[0].properties[0].value",
        ),
        (
            lambda d: d["filters"]["groups"][0]["properties"][4].update(value=[5, 1]),
            "filters.groups[0].properties[4].value",
        ),
        (
            lambda d: d["filters"]["groups"][0]["properties"][5].update(value="yesterday"),
            "filters.groups[0].properties[5].value",
        ),
        (
            lambda d: d["filters"]["groups"][0]["properties"][1].update(value="abc"),
            "filters.groups[0].properties[1].value",
        ),
        (
            lambda d: d["filters"]["groups"][0]["properties"][2].update(operator="exact"),
            "filters.groups[0].properties[2].operator",
        ),
        (
            lambda d: d["filters"]["groups"][0]["properties"][0].update(type="event"),
            "filters.groups[0].properties[0].type",
        ),
        (
            lambda d: d["filters"]["groups"][0].update(variant="missing"),
            "filters.groups[0].variant",
        ),
        (
            lambda d: d["filters"]["multivariate"]["variants"][1].update(rollout_percentage=40),
            "filters.multivariate.variants",
        ),
        (
            lambda d: d["filters"]["multivariate"]["variants"][1].update(key="control"),
            "filters.multivariate.variants[1].key",
        ),
        (
            lambda d: d["filters"]["payloads"].update(control="{not json"),
            "filters.payloads.control",
        ),
        (
            lambda d: d["filters"]["holdout"].update(exclusion_percentage=150),
            "filters.holdout.exclusion_percentage",
        ),
        (
            lambda d: d["filters"].update(aggregation_group_type_index=9),
            "filters.aggregation_group_type_index",
        ),
    ],
)
def test_invalid_definitions(mutate: Any, expected_path: str) -> None:
    definition = valid()
    mutate(definition)
    errors = validate_flag(definition)
    assert expected_path in [path for path, _ in errors], errors
    assert all(message for _, message in errors)


def test_non_object() -> None:
    assert paths([]) == [""]  # type: ignore[arg-type]
