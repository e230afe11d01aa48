"""The generated per-flag functions: edge cases of the code generator."""

from __future__ import annotations

from typing import Any

from flagstaff.flags import EvalRequest, FlagResult, compile_flags, evaluate, evaluate_checked
from flagstaff.flags.flag_codegen import FlagSource
from flagstaff.flags.model import GROUPS_NOT_EVALUATED_DESCRIPTION
from tests.unit.buckets import flag_bucket

MAPPING = {"0": "company"}


def flag(key: str, *groups: dict[str, Any], **filters: Any) -> dict[str, Any]:
    return {"id": 7, "key": key, "active": True, "filters": {"groups": list(groups), **filters}}


def cond(*properties: dict[str, Any], rollout: Any = None, **extra: Any) -> dict[str, Any]:
    return {"properties": list(properties), "rollout_percentage": rollout, **extra}


def person(key: str, value: Any, operator: str = "exact") -> dict[str, Any]:
    return {"key": key, "value": value, "operator": operator, "type": "person"}


def results(flags: list[dict[str, Any]], **request: Any) -> dict[str, FlagResult]:
    request.setdefault("distinct_id", "user-1")
    compiled = compile_flags(flags, {}, MAPPING)
    return {r.key: r for r in evaluate(compiled, EvalRequest(**request))}


def outcome(definition: dict[str, Any], **request: Any) -> tuple[Any, ...]:
    r = results([definition], **request)[definition["key"]]
    return r.enabled, r.variant, r.reason_code, r.condition_index


def source(definition: dict[str, Any]) -> str:
    compiled = compile_flags([definition], {}, MAPPING).flag(definition["key"])
    assert compiled is not None
    return FlagSource(compiled, catch=True, record=False).text


def test_definition_text_never_reaches_the_source() -> None:
    key = "f\"\n    import os  # '"
    prop = person("k'\n\"", "v\\'\"\n")
    definition = flag(key, cond(prop, rollout=100))
    text = source(definition)
    assert "import os" not in text
    assert "v\\'" not in text
    assert outcome(definition, person_properties={"k'\n\"": "v\\'\"\n"}) == (
        True,
        None,
        "condition_match",
        0,
    )


def test_condition_without_filters_ends_the_function() -> None:
    definition = flag("f", cond(person("a", 1)), cond(), cond(person("b", 1)))
    text = source(definition)
    assert "# condition 1" in text
    assert "# condition 2" not in text
    assert outcome(definition, person_properties={}) == (True, None, "condition_match", 1)


def test_miss_ranks_and_indexes() -> None:
    miss = person("plan", "pro")
    out = cond(rollout=0)
    # A later no-match never replaces an out-of-rollout; an equal rank takes the index.
    assert outcome(flag("f", out, cond(miss), cond(miss)))[2:] == ("out_of_rollout_bound", 0)
    assert outcome(flag("f", cond(miss), out, cond(miss)))[2:] == ("out_of_rollout_bound", 1)
    assert outcome(flag("f", cond(miss), out, out))[2:] == ("out_of_rollout_bound", 2)
    assert outcome(flag("f", cond(miss), cond(miss)))[2:] == ("no_condition_match", 1)
    assert outcome(flag("f"))[2:] == ("no_group_type", None)


def test_group_conditions_without_a_group() -> None:
    group = cond(aggregation_group_type_index=0)
    unknown = cond(aggregation_group_type_index=5)
    miss = cond(person("plan", "pro"))
    assert outcome(flag("f", group, unknown))[2:] == ("no_group_type", 1)
    for definition in (flag("f", group, miss), flag("f", miss, unknown)):
        r = results([definition])["f"]
        assert (r.reason_code, r.reason_description) == (
            "no_condition_match",
            GROUPS_NOT_EVALUATED_DESCRIPTION,
        )
        assert r.condition_index == (1 if definition["filters"]["groups"][0] is group else 0)
    assert outcome(flag("f", miss, group), groups={"company": "acme"}) == (
        True,
        None,
        "condition_match",
        1,
    )


def test_group_rollout_hashes_the_group_key() -> None:
    definition = flag("g", cond(rollout=50, aggregation_group_type_index=0))
    for key in ("acme", "globex", "initech", "umbrella"):
        enabled = outcome(definition, groups={"company": key})[0]
        assert enabled == (flag_bucket("g", key) <= 0.5)


def test_empty_override_and_odd_rollouts() -> None:
    # An empty hash key hashes to 0.0, inside even a 0% rollout.
    assert outcome(flag("f", cond(rollout=0)), hash_key_overrides={"f": ""})[0] is True
    assert outcome(flag("f", cond(rollout="nan")))[0] is True
    assert outcome(flag("f", cond(rollout=-5)))[2] == "out_of_rollout_bound"


def test_device_bucketing_without_device_id() -> None:
    definition = {
        **flag("f", cond(person("plan", "pro")), cond(aggregation_group_type_index=0)),
        "bucketing_identifier": "device_id",
    }
    assert outcome(definition)[2:] == ("out_of_rollout_bound", 0)
    assert outcome(definition, groups={"company": "acme"})[2:] == ("condition_match", 1)
    matched = outcome(definition, device_id="d", person_properties={"plan": "pro"})
    assert matched == (True, None, "condition_match", 0)


def test_inline_person_checks() -> None:
    is_set = flag("f", cond(person("a", "is_set", "is_set")))
    is_not_set = flag("f", cond(person("a", "is_not_set", "is_not_set")))
    assert "in person" in source(is_set)
    assert outcome(is_set, person_properties={"a": None})[0] is True
    assert outcome(is_set, person_properties={})[0] is False
    assert outcome(is_not_set, person_properties={"a": None})[0] is False
    assert outcome(is_not_set, person_properties={})[0] is True
    negative = flag("f", cond(person("a", "x", "is_not")))
    assert outcome(negative, person_properties={})[0] is True
    assert outcome(negative, person_properties={"a": "X"})[0] is False
    by_id = flag("f", cond(person("distinct_id", "user-1")))
    assert outcome(by_id)[0] is True
    assert outcome(by_id, person_properties={"distinct_id": "other"})[0] is False
    assert outcome(flag("f", cond(person("distinct_id", "x", "is_set"))))[0] is True
    assert outcome(flag("f", cond(person("a", "x", "no_such_operator"))))[0] is False


def test_dependencies_on_variants_and_false() -> None:
    variants = {"variants": [{"key": "a", "rollout_percentage": 100}]}
    target = {**flag("t", cond(person("on", True)), multivariate=variants), "id": 1}

    def dependant(key: str, flag_id: int, value: Any) -> dict[str, Any]:
        check = {"key": "1", "type": "flag", "operator": "flag_evaluates_to", "value": value}
        return {**flag(key, cond(check)), "id": flag_id}

    flags = [target, dependant("v", 2, "a"), dependant("n", 3, False), dependant("x", 4, 3)]
    on = results(flags, person_properties={"on": True})
    off = results(flags, person_properties={"on": False})
    assert on["t"].variant == "a"
    assert [on[k].enabled for k in "vnx"] == [True, False, False]
    assert [off[k].enabled for k in "vnx"] == [False, True, False]


def test_failing_cohort_fails_the_flag_after_earlier_misses() -> None:
    cohort = {"key": "id", "type": "cohort", "value": 99}
    definition = flag("f", cond(person("plan", "pro")), cond(cohort))
    r = results([definition])["f"]
    assert (r.failed, r.reason_code) == (True, "evaluation_error")
    assert outcome(definition, person_properties={"plan": "pro"})[0] is True


def test_outcomes_are_shared_across_requests() -> None:
    compiled = compile_flags([flag("f", cond(rollout=50), cond(person("a", 1)))], {}, MAPPING)
    seen = {id(evaluate(compiled, EvalRequest(distinct_id=f"u{n}"))[0]) for n in range(200)}
    assert len(seen) == 2


def _cohort_flag(cohort_id: int) -> dict[str, Any]:
    return flag("f", cond({"key": "id", "type": "cohort", "value": cohort_id}))


def _cohort_outcome(cohorts: dict[str, Any], cohort_id: int, **properties: Any) -> bool:
    compiled = compile_flags([_cohort_flag(cohort_id)], cohorts, MAPPING)
    return evaluate(compiled, EvalRequest(distinct_id="u", person_properties=properties))[0].enabled


def test_generated_cohorts_and_or_negation_and_empty_groups() -> None:
    cohorts = {
        "1": {
            "id": 1,
            "filters": {
                "properties": {
                    "type": "OR",
                    "values": [
                        {"type": "AND", "values": [person("a", 1), person("b", 2)]},
                        {**person("c", 3), "negation": True},
                    ],
                }
            },
        },
        "2": {"id": 2, "filters": {"properties": {"type": "OR", "values": []}}},
        "3": {"id": 3, "filters": {"properties": {"type": "AND", "values": []}}},
        "4": {
            "id": 4,
            "filters": {
                "properties": {
                    "type": "AND",
                    "values": [{"key": "id", "type": "cohort", "value": 1, "negation": True}],
                }
            },
        },
    }
    assert _cohort_outcome(cohorts, 1, a=1, b=2, c=3) is True
    assert _cohort_outcome(cohorts, 1, a=1, b=1, c=3) is False
    assert _cohort_outcome(cohorts, 1, a=1, b=1) is True
    assert _cohort_outcome(cohorts, 2) is False
    assert _cohort_outcome(cohorts, 3) is True
    assert _cohort_outcome(cohorts, 4, c=3) is True
    assert _cohort_outcome(cohorts, 4) is False


def test_deep_or_large_cohorts_keep_closures() -> None:
    tree: dict[str, Any] = {"type": "AND", "values": [person("a", 1)]}
    for depth in range(200):
        tree = {"type": "OR" if depth % 2 else "AND", "values": [tree]}
    wide = {"type": "OR", "values": [person(f"k{n}", n) for n in range(2000)]}
    cohorts = {
        "1": {"id": 1, "filters": {"properties": tree}},
        "2": {"id": 2, "filters": {"properties": wide}},
    }
    assert _cohort_outcome(cohorts, 1, a=1) is True
    assert _cohort_outcome(cohorts, 1, a=2) is False
    assert _cohort_outcome(cohorts, 2, k1999=1999) is True
    assert _cohort_outcome(cohorts, 2, k1999=1) is False


def test_equality_fast_paths_keep_their_meaning() -> None:
    def matches(operator: str, value: Any, prop: Any) -> bool:
        definition = flag("f", cond(person("p", value, operator)))
        return bool(outcome(definition, person_properties={"p": prop})[0])

    for value in (True, "TRUE", ["true"], [True, "True"]):
        assert [matches("exact", value, p) for p in (True, "true", ["true"], False, 1)] == [
            True,
            True,
            True,
            False,
            False,
        ]
        assert [matches("is_not", value, p) for p in (True, "True", False, "false", 0)] == [
            False,
            False,
            True,
            True,
            True,
        ]
    for value in (False, "false", ["FALSE"]):
        assert [matches("exact", value, p) for p in (False, "false", "x", None, True)] == [
            True,
            True,
            True,
            True,
            False,
        ]
    assert [matches("exact", [], p) for p in (True, "x", [])] == [True, False, True]
    assert [matches("is_not", [], p) for p in (True, "x", [])] == [False, True, False]
    assert matches("exact", ["A", 1], 1) and matches("is_not", "a", "B")
    assert not matches("is_not", {"k": 1}, {"k": 1})


def test_numbers_and_versions_of_every_type() -> None:
    def matches(operator: str, value: Any, prop: Any) -> bool:
        definition = flag("f", cond(person("p", value, operator)))
        return bool(outcome(definition, person_properties={"p": prop})[0])

    assert [matches("gt", 1, p) for p in (2, 2.5, "3", True, 10**400, float("inf"))] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert [matches("semver_gte", "1.2.0", p) for p in ("1.2.0", "v1.3", 2, 1.5, True)] == [
        True,
        True,
        True,
        True,
        False,
    ]
    assert matches("semver_lt", "1.2.0", "1.1.9") and not matches("semver_gt", "1.2.0", "1.2")


def test_flags_sharing_a_regex_share_its_last_answer() -> None:
    pattern = person("email", "^[a-m].*@", "regex")
    negated = person("email", "^[a-m].*@", "not_regex")
    flags = [flag(f"r{n}", cond(pattern if n % 2 else negated)) for n in range(6)]
    flags.append(flag("other", cond(person("name", "^[a-m].*@", "regex"))))
    for email, name, expected in (
        ("bob@x.io", "zed@x", True),
        ("zoe@x.io", "amy@x", False),
        (["bob@"], "bob@", False),
        ("amy@x.io", 5, True),
    ):
        got = results(flags, person_properties={"email": email, "name": name})
        assert [got[f"r{n}"].enabled for n in range(6)] == [not expected, expected] * 3
        assert got["other"].enabled is (name == "amy@x" or name == "bob@")


def test_evaluate_checked_reports_failures() -> None:
    cohort = {"key": "id", "type": "cohort", "value": 99}
    broken = {**flag("broken", cond(cohort)), "id": 1}
    plain = {**flag("plain", cond()), "id": 2}
    compiled = compile_flags([broken, plain], {}, MAPPING)
    assert evaluate_checked(compiled, EvalRequest(distinct_id="u"))[1] is True
    only_plain = EvalRequest(distinct_id="u", flag_keys=["plain"])
    assert evaluate_checked(compiled, only_plain) == ([results([plain])["plain"]], False)
    bad = {**flag("bad", cond()), "filters": "not an object"}
    assert evaluate_checked(compile_flags([bad], {}, MAPPING), EvalRequest(distinct_id="u"))[1]


# -- generated source in tracebacks ---------------------------------------------------------------


def test_generated_source_shows_in_tracebacks_and_is_dropped_with_its_version() -> None:
    import gc
    import linecache
    import traceback

    definition = {**flag("checkout", cond(person("plan", "pro"), rollout=50)), "version": 3}
    compiled = compile_flags([definition], {}, MAPPING)
    name = "<flagstaff-flag:checkout:3>"
    assert "person.get(" in "".join(linecache.getlines(name))
    # A broken request (properties that are not a dict) fails inside the generated code:
    # its traceback names the flag and shows the generated line.
    try:
        evaluate(compiled, EvalRequest(distinct_id="u", person_properties=None))  # type: ignore[arg-type]
    except AttributeError as error:
        text = "".join(traceback.format_exception(error))
    else:
        raise AssertionError("the broken request did not fail")
    assert f'File "{name}", line' in text
    assert "person.get(" in text
    del compiled
    gc.collect()
    assert linecache.getlines(name) == []


def test_two_live_versions_with_different_sources_keep_both() -> None:
    import linecache

    first = compile_flags([{**flag("f", cond(person("a", 1))), "version": 1}], {}, MAPPING)
    second = compile_flags(
        [{**flag("f", cond(person("b", 1), rollout=5)), "version": 1}], {}, MAPPING
    )
    same = compile_flags([{**flag("f", cond(person("a", 1))), "version": 1}], {}, MAPPING)
    one = "".join(linecache.getlines("<flagstaff-flag:f:1>"))
    two = "".join(linecache.getlines("<flagstaff-flag:f:1#2>"))
    assert one and two and one != two
    del first
    assert linecache.getlines("<flagstaff-flag:f:1>")  # still used by ``same``
    del same, second
    assert not linecache.getlines("<flagstaff-flag:f:1>")
    assert not linecache.getlines("<flagstaff-flag:f:1#2>")


def test_cohort_functions_are_named_after_their_cohort() -> None:
    import linecache

    cohorts = {
        "5": {"id": 5, "filters": {"properties": {"type": "AND", "values": [person("a", 1)]}}}
    }
    definition = flag("c", cond({"key": "id", "type": "cohort", "value": 5}))
    compiled = compile_flags([definition], cohorts, MAPPING)
    assert "cohort_results" in "".join(linecache.getlines("<flagstaff-cohort:5>"))
    del compiled
