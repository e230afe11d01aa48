"""Flag evaluation: reasons, holdouts, dependencies, cohorts, groups, request filters."""

from __future__ import annotations

from typing import Any

from flagstaff.flags import (
    EvalRequest,
    FlagResult,
    compile_flags,
    detect_runtime,
    evaluate,
)
from flagstaff.flags.local_evaluation import local_evaluation_cohorts, local_evaluation_flags
from tests.unit.buckets import flag_bucket, holdout_bucket

MAPPING = {"0": "company", "1": "project"}


def flag(key: str, *groups: dict[str, Any], flag_id: int = 1, **extra: Any) -> dict[str, Any]:
    filters = extra.pop("filters", {})
    return {
        "id": flag_id,
        "key": key,
        "name": f"{key} name",
        "active": True,
        "version": 3,
        "filters": {"groups": list(groups), **filters},
        **extra,
    }


def cond(*properties: dict[str, Any], rollout: float | None = None, **extra: Any) -> dict:
    return {"properties": list(properties), "rollout_percentage": rollout, **extra}


def person(key: str, value: Any, operator: str = "exact") -> dict[str, Any]:
    return {"key": key, "value": value, "operator": operator, "type": "person"}


def run(
    flags: list[dict[str, Any]],
    cohorts: dict[str, Any] | None = None,
    **request: Any,
) -> dict[str, FlagResult]:
    request.setdefault("distinct_id", "user-1")
    compiled = compile_flags(flags, cohorts or {}, MAPPING)
    return {r.key: r for r in evaluate(compiled, EvalRequest(**request))}


def one(flags: list[dict[str, Any]], key: str = "f", **kwargs: Any) -> FlagResult:
    return run(flags, **kwargs)[key]


# -- reasons and condition indexes ---------------------------------------------------------


def test_condition_match_reports_matched_set() -> None:
    result = one([flag("f", cond(person("plan", "pro")), cond())], person_properties={})
    assert (result.enabled, result.reason_code, result.condition_index) == (
        True,
        "condition_match",
        1,
    )
    assert result.reason_description == "Matched condition set 2"
    assert (result.id, result.version, result.description) == (1, 3, "f name")


def test_no_match_reports_last_condition_of_best_reason() -> None:
    result = one(
        [flag("f", cond(person("plan", "pro")), cond(person("plan", "team")))],
        person_properties={"plan": "free"},
    )
    assert (result.enabled, result.reason_code, result.condition_index) == (
        False,
        "no_condition_match",
        1,
    )
    assert result.reason_description == "No matching condition set"


def test_out_of_rollout_outranks_no_match() -> None:
    result = one(
        [flag("f", cond(rollout=0), cond(person("plan", "x")))],
        person_properties={},
        distinct_id="someone",
    )
    assert (result.reason_code, result.condition_index) == ("out_of_rollout_bound", 0)
    assert result.reason_description == "Out of rollout bound"


def test_flag_without_conditions_is_off() -> None:
    result = one([flag("f")])
    assert (result.enabled, result.reason_code, result.condition_index) == (
        False,
        "no_group_type",
        None,
    )


def test_rollout_uses_bucket() -> None:
    flags = [flag("simple-flag", cond(rollout=45))]
    for number in range(10):
        distinct_id = f"distinct_id_{number}"
        expected = flag_bucket("simple-flag", distinct_id) <= 0.45
        assert one(flags, "simple-flag", distinct_id=distinct_id).enabled is expected


# -- variants and payloads -----------------------------------------------------------------


MULTI = {
    "multivariate": {
        "variants": [
            {"key": "control", "rollout_percentage": 50},
            {"key": "test", "rollout_percentage": 50},
        ]
    },
    "payloads": {"control": '{"color": "blue"}', "test": '"red"'},
}


def test_variant_override_and_payload() -> None:
    result = one([flag("f", cond(variant="test"), filters=MULTI)])
    assert (result.variant, result.payload) == ("test", '"red"')


def test_invalid_variant_override_falls_back_to_hash() -> None:
    result = one([flag("f", cond(variant="nope"), filters=MULTI)], distinct_id="u")
    expected = "control" if flag_bucket("f", "u", "variant") < 0.5 else "test"
    assert result.variant == expected


def test_boolean_payload_and_non_string_payload() -> None:
    result = one([flag("f", cond(), filters={"payloads": {"true": {"a": [1, 2]}}})])
    assert result.payload == '{"a":[1,2]}'
    off = one([flag("f", cond(rollout=0), filters={"payloads": {"true": "1"}})], distinct_id="z")
    assert off.payload is None


# -- properties added by the engine ---------------------------------------------------------


def test_distinct_id_and_group_key_are_available_as_properties() -> None:
    flags = [
        flag("p", cond(person("distinct_id", "user-7"))),
        flag(
            "g",
            cond(
                {
                    "key": "$group_key",
                    "value": "acme",
                    "type": "group",
                    "group_type_index": 0,
                }
            ),
            flag_id=2,
            filters={"aggregation_group_type_index": 0},
        ),
    ]
    results = run(flags, distinct_id="user-7", groups={"company": "acme"})
    assert results["p"].enabled and results["g"].enabled


# -- groups ---------------------------------------------------------------------------------


def group_prop(key: str, value: Any, index: int = 0, operator: str = "exact") -> dict:
    return {
        "key": key,
        "value": value,
        "operator": operator,
        "type": "group",
        "group_type_index": index,
    }


def test_group_flag_without_group_is_no_group_type() -> None:
    flags = [
        flag("f", cond(group_prop("tier", "pro")), filters={"aggregation_group_type_index": 0})
    ]
    result = one(flags)
    assert (result.enabled, result.reason_code, result.condition_index) == (
        False,
        "no_group_type",
        0,
    )
    matched = one(
        flags,
        groups={"company": "acme"},
        group_properties={"company": {"tier": "pro"}},
    )
    assert matched.enabled


def test_group_flag_buckets_by_group_key() -> None:
    flags = [flag("g", cond(rollout=50), filters={"aggregation_group_type_index": 0})]
    for number in range(8):
        key = f"company-{number}"
        expected = flag_bucket("g", key) <= 0.5
        result = one(flags, "g", distinct_id=f"other-{number}", groups={"company": key})
        assert result.enabled is expected


def test_mixed_person_and_group_conditions() -> None:
    flags = [
        flag(
            "f",
            cond(group_prop("tier", "pro", index=1), aggregation_group_type_index=1),
            cond(person("plan", "team")),
        )
    ]
    result = one(flags, person_properties={"plan": "free"})
    assert (result.reason_code, result.condition_index) == ("no_condition_match", 1)
    assert result.reason_description.startswith("No matching condition set (group conditions")
    grouped = one(
        flags,
        person_properties={"plan": "free"},
        groups={"project": "p1"},
        group_properties={"project": {"tier": "pro"}},
    )
    assert (grouped.enabled, grouped.condition_index) == (True, 0)


# -- holdouts and early access ----------------------------------------------------------------


def test_holdout_before_conditions() -> None:
    flags = [
        flag("f", cond(), filters={**MULTI, "holdout": {"id": 42, "exclusion_percentage": 100}})
    ]
    result = one(flags)
    assert (result.enabled, result.variant, result.reason_code, result.condition_index) == (
        True,
        "holdout-42",
        "holdout_condition_value",
        None,
    )


def test_holdout_percentage_uses_holdout_hash() -> None:
    flags = [flag("f", cond(), filters={"holdout": {"id": 7, "exclusion_percentage": 50}})]
    for identifier in ["test-identifier", "example_id2", "example_id", "some_distinct_id"]:
        in_holdout = holdout_bucket(identifier) <= 0.5
        result = one(flags, distinct_id=identifier)
        assert (result.variant == "holdout-7") is in_holdout
        assert result.enabled


def test_legacy_holdout_groups() -> None:
    filters = {
        "holdout_groups": [{"properties": [], "rollout_percentage": 100, "variant": "holdout-3"}]
    }
    assert one([flag("f", cond(rollout=0), filters=filters)]).variant == "holdout-3"


def test_feature_enrollment() -> None:
    flags = [flag("beta", cond(rollout=0), filters={"feature_enrollment": True})]
    on = one(flags, "beta", person_properties={"$feature_enrollment/beta": True})
    assert (on.enabled, on.reason_code, on.condition_index) == (True, "super_condition_value", 0)
    off = one(flags, "beta", person_properties={"$feature_enrollment/beta": "false"})
    assert (off.enabled, off.reason_code) == (False, "super_condition_value")
    unset = one(flags, "beta", person_properties={}, distinct_id="q")
    assert unset.reason_code == "out_of_rollout_bound"


def test_legacy_super_groups() -> None:
    filters = {"super_groups": [{"properties": [person("$feature_enrollment/x", ["true"])]}]}
    flags = [flag("x", cond(rollout=0), filters=filters)]
    assert one(flags, "x", person_properties={"$feature_enrollment/x": True}).enabled
    assert one(flags, "x", person_properties={}, distinct_id="q").reason_code == (
        "out_of_rollout_bound"
    )


# -- bucketing identifiers ---------------------------------------------------------------------


def test_device_id_bucketing() -> None:
    flags = [flag("d", cond(rollout=50), bucketing_identifier="device_id")]
    for number in range(8):
        device = f"device-{number}"
        expected = flag_bucket("d", device) <= 0.5
        assert one(flags, "d", device_id=device).enabled is expected
    missing = one(flags, "d")
    assert (missing.enabled, missing.reason_code, missing.condition_index) == (
        False,
        "out_of_rollout_bound",
        0,
    )


def test_hash_key_override() -> None:
    flags = [flag("h", cond(rollout=50))]
    for number in range(8):
        anon = f"anon-{number}"
        expected = flag_bucket("h", anon) <= 0.5
        result = one(flags, "h", distinct_id="identified", hash_key_overrides={"h": anon})
        assert result.enabled is expected


def test_continuity_keys_and_static_usage() -> None:
    compiled = compile_flags(
        [
            flag("a", cond(), ensure_experience_continuity=True),
            flag("b", cond(), flag_id=2, deleted=True),
        ],
        {},
        {},
    )
    assert compiled.keys == frozenset({"a"})
    assert compiled.continuity_flag_keys == frozenset({"a"})
    assert compiled.uses_static_cohorts is False


# -- cohorts -----------------------------------------------------------------------------------


COHORTS = {
    "1": {
        "id": 1,
        "is_static": False,
        "filters": {
            "properties": {
                "type": "OR",
                "values": [
                    {"type": "AND", "values": [person("plan", "pro")]},
                    {
                        "type": "AND",
                        "values": [
                            {**person("country", "US"), "negation": True},
                            person("age", 18, "gte"),
                        ],
                    },
                ],
            }
        },
    },
    "2": {
        "id": 2,
        "is_static": False,
        "filters": {
            "properties": {
                "type": "AND",
                "values": [{"key": "id", "type": "cohort", "value": 1, "negation": True}],
            }
        },
    },
    "3": {"id": 3, "is_static": True},
}


def cohort(cohort_id: int, operator: str = "in") -> dict[str, Any]:
    return {"key": "id", "type": "cohort", "value": cohort_id, "operator": operator}


def test_dynamic_cohort_nested_groups_and_negation() -> None:
    flags = [flag("c1", cond(cohort(1))), flag("c2", cond(cohort(2)), flag_id=2)]
    pro = run(flags, COHORTS, person_properties={"plan": "pro"})
    assert pro["c1"].enabled and not pro["c2"].enabled
    adult_abroad = run(flags, COHORTS, person_properties={"country": "DE", "age": 30})
    assert adult_abroad["c1"].enabled
    adult_us = run(flags, COHORTS, person_properties={"country": "US", "age": 30})
    assert not adult_us["c1"].enabled and adult_us["c2"].enabled


def test_not_in_cohort() -> None:
    flags = [flag("f", cond(cohort(1, "not_in")))]
    assert one(flags, cohorts=COHORTS, person_properties={"plan": "free"}).enabled
    assert not one(flags, cohorts=COHORTS, person_properties={"plan": "pro"}).enabled


def test_static_cohort_membership_comes_from_the_request() -> None:
    flags = [flag("s", cond(cohort(3))), flag("n", cond(cohort(3, "not_in")), flag_id=2)]
    compiled = compile_flags(flags, COHORTS, MAPPING)
    assert compiled.uses_static_cohorts
    member = {
        r.key: r.enabled
        for r in evaluate(compiled, EvalRequest(distinct_id="u", static_cohort_ids=frozenset({3})))
    }
    assert member == {"s": True, "n": False}
    outsider = {r.key: r.enabled for r in evaluate(compiled, EvalRequest(distinct_id="u"))}
    assert outsider == {"s": False, "n": True}


def test_unknown_or_cyclic_cohort_fails_the_flag_only() -> None:
    cyclic = {
        "8": {"id": 8, "filters": {"properties": {"type": "AND", "values": [cohort(9)]}}},
        "9": {"id": 9, "filters": {"properties": {"type": "AND", "values": [cohort(8)]}}},
    }
    flags = [
        flag("missing", cond(cohort(77))),
        flag("cycle", cond(cohort(8)), flag_id=2),
        flag("fine", cond(), flag_id=3),
        flag("skipped", cond(person("plan", "x"), cohort(77)), flag_id=4),
    ]
    results = run(flags, cyclic)
    assert results["missing"].failed and not results["missing"].enabled
    assert results["cycle"].failed
    assert results["fine"].enabled and not results["fine"].failed
    assert not results["skipped"].failed


# -- flag dependencies ---------------------------------------------------------------------------


def dep(target: Any, value: Any) -> dict[str, Any]:
    return {"key": str(target), "type": "flag", "value": value, "operator": "flag_evaluates_to"}


def test_dependencies_by_id_and_key() -> None:
    flags = [
        flag("child", cond(dep(1, True)), flag_id=2),
        flag("base", cond(person("plan", "pro")), flag_id=1),
        flag("by-key", cond(dep("base", False)), flag_id=3),
        flag("variant", cond(dep(4, "test")), flag_id=5),
        flag("multi", cond(variant="test"), flag_id=4, filters=MULTI),
    ]
    pro = run(flags, person_properties={"plan": "pro"})
    order = list(pro)
    assert sorted(order) == ["base", "by-key", "child", "multi", "variant"]
    assert order.index("base") < order.index("child") and order.index("multi") < order.index(
        "variant"
    )
    assert pro["child"].enabled and not pro["by-key"].enabled and pro["variant"].enabled
    free = run(flags, person_properties={"plan": "free"})
    assert not free["child"].enabled and free["by-key"].enabled


def test_missing_and_cyclic_dependencies() -> None:
    flags = [
        flag("missing", cond(dep(999, True)), flag_id=1),
        flag("a", cond(dep(3, True)), flag_id=2),
        flag("b", cond(dep(2, True)), flag_id=3),
        flag("after-cycle", cond(dep(2, False)), flag_id=4),
        flag("ok", cond(), flag_id=5),
    ]
    compiled = compile_flags(flags, {}, {})
    assert compiled.has_dependency_cycle
    results = {r.key: r for r in evaluate(compiled, EvalRequest(distinct_id="u"))}
    # Flags on the cycle are left out; those depending on them miss a dependency.
    assert "a" not in results and "b" not in results
    for key in ("missing", "after-cycle"):
        assert (results[key].enabled, results[key].reason_code) == (False, "missing_dependency")
        assert results[key].condition_index is None
    assert results["ok"].enabled


def test_inactive_flags_are_omitted_and_count_as_false() -> None:
    flags = [
        flag("off", cond(), flag_id=1, active=False),
        flag("needs-off", cond(dep(1, False)), flag_id=2),
    ]
    results = run(flags)
    assert "off" not in results and results["needs-off"].enabled


# -- request filters -----------------------------------------------------------------------------


def test_runtime_and_context_filters() -> None:
    flags = [
        flag("any", cond(), flag_id=1),
        flag("all", cond(), flag_id=2, evaluation_runtime="all"),
        flag("server", cond(), flag_id=3, evaluation_runtime="server"),
        flag("client", cond(), flag_id=4, evaluation_runtime="client", evaluation_tags=["web"]),
        flag("tagged", cond(), flag_id=5, evaluation_contexts=["app"]),
    ]
    assert set(run(flags)) == {"any", "all", "tagged"}
    assert set(run(flags, runtime="server")) == {"any", "all", "server", "tagged"}
    assert set(run(flags, runtime="client")) == {"any", "all", "client", "tagged"}
    assert set(run(flags, runtime="client", contexts=["web"])) == {"any", "all", "client"}
    assert set(run(flags, contexts=["app"])) == {"any", "all", "tagged"}


def test_flag_keys_include_dependencies() -> None:
    flags = [
        flag("base", cond(), flag_id=1),
        flag("child", cond(dep(1, True)), flag_id=2),
        flag("other", cond(), flag_id=3),
    ]
    assert list(run(flags, flag_keys=["child"])) == ["base", "child"]
    assert list(run(flags, flag_keys=["nope"])) == []


def test_filtered_dependency_counts_as_false() -> None:
    flags = [
        flag("server-only", cond(), flag_id=1, evaluation_runtime="server"),
        flag("child", cond(dep(1, False)), flag_id=2),
    ]
    results = run(flags, runtime="client")
    assert list(results) == ["child"] and results["child"].enabled


def test_bad_flag_fails_alone() -> None:
    flags = [
        {
            "id": 1,
            "key": "broken",
            "active": True,
            "filters": {"groups": [{"rollout_percentage": "x"}]},
        },
        flag("fine", cond(), flag_id=2),
    ]
    results = run(flags)
    assert results["broken"].failed and not results["broken"].enabled
    assert results["fine"].enabled


def test_detect_runtime() -> None:
    assert detect_runtime("server", "Mozilla/5.0", True) == "server"
    assert detect_runtime(None, "posthog-python/7.0.0", False) == "server"
    assert detect_runtime(None, "posthog-node/5.1 (node 20)", True) == "server"
    assert detect_runtime(None, "posthog-js/1.200.0", False) == "client"
    assert detect_runtime(None, "posthog-android/3.0.0", False) == "client"
    assert detect_runtime(None, "Mozilla/5.0 (X11) Firefox/120", False) == "client"
    assert detect_runtime(None, "curl/8.0", False) == "server"
    assert detect_runtime(None, "python-requests/2.31", False) == "server"
    assert detect_runtime(None, "my-app/1.0", True) == "client"
    assert detect_runtime(None, "my-app/1.0", False) is None
    assert detect_runtime("bogus", None, False) is None


# -- local evaluation shape --------------------------------------------------------------------


def test_local_evaluation_rewrites_dependencies() -> None:
    flags = [
        flag("c", cond(dep(2, True)), flag_id=3),
        flag("b", cond(dep(1, True)), flag_id=2),
        flag("a", cond(), flag_id=1),
        flag("loop", cond(dep(4, True)), flag_id=4),
        flag("lost", cond(dep(99, True)), flag_id=5),
        flag("gone", cond(), flag_id=6, deleted=True),
    ]
    local = {f["key"]: f for f in local_evaluation_flags(flags)}
    assert list(local) == ["a", "b", "c", "loop", "lost"]
    prop = local["c"]["filters"]["groups"][0]["properties"][0]
    assert (prop["key"], prop["dependency_chain"]) == ("b", ["a", "b"])
    assert local["loop"]["filters"]["groups"][0]["properties"][0]["dependency_chain"] == []
    lost = local["lost"]["filters"]["groups"][0]["properties"][0]
    assert (lost["key"], lost["dependency_chain"]) == ("99", [])
    assert local_evaluation_cohorts(COHORTS) == {
        "1": COHORTS["1"]["filters"]["properties"],
        "2": COHORTS["2"]["filters"]["properties"],
    }
