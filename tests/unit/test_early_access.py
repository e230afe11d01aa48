"""Early access features: validation, the enrollment condition on their flag, the public list."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from flagstaff.application.early_access import EarlyAccessFeatureInput, public_stages
from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import decode, given
from flagstaff.flags import EvalRequest, compile_flags, evaluate, validate_flag
from flagstaff.surveys import early_access as ea
from flagstaff.surveys import public
from tests.stored_flags import stored_flag

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def create(**body: Any) -> ea.EarlyAccessFeature:
    return ea.feature_from_input({"name": "Dark Mode!", "stage": "beta", **body}, None, now=NOW)


def enabled(flag: dict[str, Any], **person: Any) -> bool:
    compiled = compile_flags([{"id": 1, "version": 1, "active": True, **flag}], {}, {})
    (result,) = evaluate(compiled, EvalRequest(distinct_id="d1", person_properties=person))
    return result.enabled


def test_slugify_like_django() -> None:
    assert ea.slugify("Dark Mode!") == "dark-mode"
    assert ea.slugify("  Élan -- vital_ ") == "elan-vital"


def test_create_without_flag_creates_one_with_enrollment() -> None:
    feature = create(description="Night", documentation_url="https://docs.test/dark")
    (change,) = ea.plan_create(feature)
    assert change.action == "create"
    flag = change.flag
    assert flag["key"] == "dark-mode" and flag["name"] == "Feature Flag for Feature Dark Mode!"
    assert flag["filters"]["groups"] == [
        {"properties": [], "rollout_percentage": 0, "variant": None}
    ]
    assert flag["filters"]["super_groups"] == [
        {
            "properties": [
                {
                    "key": "$feature_enrollment/dark-mode",
                    "type": "person",
                    "operator": "exact",
                    "value": ["true"],
                }
            ],
            "rollout_percentage": 100,
        }
    ]
    assert validate_flag(flag) == []
    # posthog-js's updateEarlyAccessFeatureEnrollment $sets the property to true or false.
    assert not enabled(flag)
    assert enabled(flag, **{"$feature_enrollment/dark-mode": True})
    assert not enabled(flag, **{"$feature_enrollment/dark-mode": False})


def test_draft_stage_gets_no_enrollment_and_stage_changes_follow() -> None:
    draft = create(stage="draft")
    (change,) = ea.plan_create(draft)
    assert "super_groups" not in change.flag["filters"]
    flag = stored_flag({"key": "dark-mode", "filters": change.flag["filters"]}, 9)
    beta = ea.feature_from_input({"stage": "beta"}, draft, now=NOW)
    (update,) = ea.plan_update(draft, beta, flag)
    assert update.flag_id == 9
    assert update.flag["filters"]["super_groups"] == ea.enrollment_super_groups("dark-mode")
    archived = ea.feature_from_input({"stage": "archived"}, beta, now=NOW)
    (update,) = ea.plan_update(
        beta, archived, msgspec.structs.replace(flag, filters=update.flag["filters"])
    )
    assert update.flag["filters"]["super_groups"] is None
    alpha = ea.feature_from_input({"stage": "alpha"}, beta, now=NOW)
    assert ea.plan_update(beta, alpha, flag) == []
    (cleared,) = ea.plan_delete(flag)
    assert cleared.flag["filters"]["super_groups"] is None


def test_linking_an_existing_flag() -> None:
    facts = ea.FlagFacts(id=4, key="new-nav")
    feature = ea.feature_from_input(
        {"name": "Nav", "stage": "alpha", "feature_flag_id": 4}, None, now=NOW, flag=facts
    )
    assert feature.feature_flag_id == 4
    existing = stored_flag(
        {"key": "new-nav", "filters": {"groups": [{"rollout_percentage": 10}]}}, 4
    )
    (update,) = ea.plan_create(feature, existing)
    assert update.flag["filters"]["groups"] == [{"rollout_percentage": 10}]
    assert update.flag["filters"]["super_groups"] == ea.enrollment_super_groups("new-nav")


@pytest.mark.parametrize(
    ("body", "facts", "path", "message"),
    [
        ({"name": ""}, None, "name", "This field is required."),
        ({"documentation_url": "docs"}, None, "documentation_url", "Enter a valid URL."),
        (
            {"feature_flag_id": 4},
            None,
            "feature_flag_id",
            "Feature Flag with this ID does not exist",
        ),
        (
            {"feature_flag_id": 4},
            ea.FlagFacts(id=4, key="k", variant_count=2),
            "feature_flag_id",
            "Multivariate feature flags are not supported",
        ),
        (
            {"feature_flag_id": 4},
            ea.FlagFacts(id=4, key="k", aggregation_group_type_index=0),
            "feature_flag_id",
            "Group-based feature flags are not supported",
        ),
        (
            {"feature_flag_id": 4},
            ea.FlagFacts(id=4, key="k", linked_feature_id="x"),
            "feature_flag_id",
            "Linked feature flag k already has a feature attached to it.",
        ),
        ({"name": "!!!"}, None, "name", "must contain a letter or digit"),
    ],
)
def test_validation_errors_per_field(
    body: dict[str, Any], facts: ea.FlagFacts | None, path: str, message: str
) -> None:
    with pytest.raises(ea.EarlyAccessInvalid) as info:
        ea.feature_from_input({"name": "X", "stage": "beta", **body}, None, now=NOW, flag=facts)
    found = dict(info.value.errors)
    assert path in found and message in found[path]


def test_the_input_types_are_the_structs() -> None:
    with pytest.raises(ApiError) as info:
        decode(EarlyAccessFeatureInput, {"name": "X", "stage": "gamma"})
    assert (info.value.code, info.value.attr) == ("invalid_input", "stage")
    with pytest.raises(ApiError) as info:
        decode(EarlyAccessFeatureInput, {"feature_flag_id": True})
    assert info.value.attr == "feature_flag_id"
    inp = decode(EarlyAccessFeatureInput, {"name": "X", "payload": None, "feature_flag": {}})
    assert given(inp) == {"name": "X", "payload": None}
    with pytest.raises(ApiError) as info:
        public_stages(["beta,gamma"])
    assert info.value.attr == "stage"
    assert public_stages([]) == ("beta",)


def test_public_list_filters_by_stage() -> None:
    beta = create()
    beta = type(beta)(
        **{**{f: getattr(beta, f) for f in beta.__struct_fields__}, "feature_flag_id": 9}
    )
    concept = ea.feature_from_input({"name": "Idea", "stage": "concept"}, None, now=NOW)
    body = public.early_access_response([beta, concept], {9: "dark-mode"}, ea.parse_stages([]))
    assert body == {
        "earlyAccessFeatures": [
            {
                "id": beta.id,
                "name": "Dark Mode!",
                "description": "",
                "stage": "beta",
                "documentationUrl": "",
                "payload": {},
                "flagKey": "dark-mode",
            }
        ]
    }
    both = public.early_access_response([beta, concept], {}, ea.parse_stages(["concept", "beta"]))
    assert [f["stage"] for f in both["earlyAccessFeatures"]] == ["beta", "concept"]
    assert ea.parse_stages(["alpha,beta"]) == ("alpha", "beta")
