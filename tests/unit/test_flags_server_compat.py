"""What PostHog's server accepts and how it evaluates it: regex engines and budgets,
non-numeric comparisons, semver parsing, early exit, dependency cycles, empty ids."""

from __future__ import annotations

from typing import Any

import pytest

from flagstaff.flags import EvalRequest, compile_flags, evaluate, validate_flag
from flagstaff.flags import regex as flag_regex
from flagstaff.flags.operators import compile_test


def matches(operator: str, value: Any, prop: Any) -> bool:
    return compile_test(operator, value)[0](prop)


def engine_of(pattern: str) -> str | None:
    """Which engine runs ``pattern``: ``"re2"``, ``"backtracking"``, or None (invalid)."""
    if flag_regex._re2_search(pattern) is not None:
        return "re2"
    if flag_regex._backtracking_search(pattern) is not None:
        return "backtracking"
    return None


# -- regex -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "engine"),
    [
        ("^beta-[0-9]+$", "re2"),
        ("foo(?!bar)", "backtracking"),
        ("(?<=@)example\\.com", "backtracking"),
        ("(ab)\\1", "backtracking"),
        ("(unclosed", None),
    ],
)
def test_each_pattern_runs_on_the_engine_that_can_run_it(pattern: str, engine: str | None) -> None:
    assert engine_of(pattern) == engine


@pytest.mark.parametrize(
    ("operator", "pattern", "prop", "expected"),
    [
        ("regex", "foo(?!bar)", "foobaz", True),
        ("regex", "foo(?!bar)", "foobar", False),
        ("not_regex", "foo(?!bar)", "foobar", True),
        ("regex", "(?<=@)example\\.com$", "ana@example.com", True),
        ("regex", "(?<=@)example\\.com$", "example.com", False),
        ("regex", "^(\\w+)-\\1$", "abc-abc", True),
        ("regex", "^(\\w+)-\\1$", "abc-abd", False),
        ("regex", "(unclosed", "(unclosed", False),
        ("not_regex", "(unclosed", "anything", False),
    ],
)
def test_look_around_and_back_references(
    operator: str, pattern: str, prop: str, expected: bool
) -> None:
    assert matches(operator, pattern, prop) is expected


def test_a_catastrophic_backtracking_pattern_is_cut_off_by_its_timeout() -> None:
    pattern = "^(a+)+(?=b)c$"  # look-ahead: only the backtracking engine runs it
    assert engine_of(pattern) == "backtracking"
    value = "a" * 5000 + "!"
    search = flag_regex.compile_search(pattern)
    assert search is not None
    assert search(value) is None  # undecided: the timeout ended the search
    # Neither operator matches an undecided search.
    assert matches("regex", pattern, value) is False
    assert matches("not_regex", pattern, value) is False
    # The same pattern still decides short values.
    assert search("aaab") is False


def test_a_bounded_repetition_on_a_huge_value_is_not_searched() -> None:
    """Issue 18: ``a.{500}b`` on a 1 MB value ran for seconds on RE2."""
    pattern = "a.{500}b"
    assert engine_of(pattern) == "re2"
    huge = "ac" * (1 << 19)
    search = flag_regex.compile_search(pattern)
    assert search is not None
    assert search(huge) is None  # over the step budget: not searched
    assert matches("regex", pattern, huge) is False
    assert matches("not_regex", pattern, huge) is False
    # Within the budget the pattern is decided as usual.
    assert search("a" + "x" * 500 + "b") is True
    assert search("a" + "x" * 499 + "b") is False


def test_simple_patterns_still_search_large_values() -> None:
    big = "x" * 200_000 + "needle"
    assert matches("regex", "needle$", big) is True
    assert matches("regex", "needle", "x" * (flag_regex.MAX_INPUT + 1)) is False
    assert matches("not_regex", "needle", "x" * (flag_regex.MAX_INPUT + 1)) is False


def test_backtracking_values_are_capped_in_length() -> None:
    pattern = "b(?=c)"
    fits = "a" * (flag_regex.BACKTRACKING_MAX_INPUT - 2) + "bc"
    assert matches("regex", pattern, fits) is True
    assert matches("regex", pattern, "a" + fits) is False
    assert matches("not_regex", pattern, "a" + fits) is False


# -- numeric comparisons ------------------------------------------------------------------


@pytest.mark.parametrize("operator", ["gt", "gte", "lt", "lte"])
def test_non_numeric_comparison_values_are_stored_and_never_match(operator: str) -> None:
    flag = {"key": "f", "filters": {"groups": [{"properties": [], "rollout_percentage": 100}]}}
    flag["filters"]["groups"][0]["properties"] = [  # type: ignore[index]
        {"key": "plan", "type": "person", "operator": operator, "value": "pro"}
    ]
    assert validate_flag(flag) == []
    for prop in ("pro", "zzz", "aaa", 5, "5"):
        assert matches(operator, "pro", prop) is False
    assert matches(operator, "10", 10) is (operator in ("gte", "lte"))


# -- semver --------------------------------------------------------------------------------


@pytest.mark.parametrize("prop", ["1.2.3.4", "1..2.3", "1.2.3.", "1.2.x", "", "v", "1.2.3-", "x"])
@pytest.mark.parametrize(
    "operator", ["semver_eq", "semver_neq", "semver_gt", "semver_lt", "semver_tilde"]
)
def test_what_is_not_a_version_never_matches(operator: str, prop: str) -> None:
    assert matches(operator, "1.2.3", prop) is False


@pytest.mark.parametrize(
    ("operator", "value", "prop", "expected"),
    [
        ("semver_lt", "1.0.0", "1.0.0-rc.1", True),
        ("semver_lt", "1.0.0-beta", "1.0.0-alpha.9", True),
        ("semver_lt", "1.0.0-alpha.1", "1.0.0-alpha", True),
        ("semver_gt", "1.0.0-alpha.10", "1.0.0-alpha.9", False),
        ("semver_gt", "1.0.0-alpha.beta", "1.0.0-alpha.99", False),
        ("semver_eq", "1.0.0", "1.0.0-rc.1", False),
        ("semver_eq", "3.8.0", "3.08", True),
        ("semver_eq", "2.0.0", "v2", True),
        ("semver_eq", "1.0.0", "1.0.0+build.7", False),
        ("semver_gte", "1.2.0", 1.2, True),
        ("semver_tilde", "1.2.3", "1.2.10", True),
        ("semver_tilde", "1.2.3", "1.2.4-beta", False),
        ("semver_tilde", "1.2.3-beta", "1.2.3-rc", True),
        ("semver_caret", "0.0.3", "0.0.4", False),
        ("semver_caret", "0.2.3", "0.2.99", True),
        ("semver_wildcard", "1.2.*", "1.2.0", True),
        ("semver_wildcard", "1.2.*", "1.3.0", False),
        ("semver_wildcard", "1.*.3", "1.2.3", False),
        ("semver_wildcard", "*", "0.0.1", True),
        ("semver_wildcard", "1.2", "1.9.0", True),
    ],
)
def test_semver_ordering_as_the_server(
    operator: str, value: Any, prop: Any, expected: bool
) -> None:
    assert matches(operator, value, prop) is expected


def test_semver_filters_that_are_not_versions_are_stored() -> None:
    flag = {
        "key": "f",
        "filters": {
            "groups": [
                {
                    "properties": [
                        {"key": "v", "type": "person", "operator": "semver_eq", "value": "1.2.3.4"}
                    ],
                    "rollout_percentage": 100,
                }
            ]
        },
    }
    assert validate_flag(flag) == []
    assert matches("semver_eq", "1.2.3.4", "1.2.3.4") is False


# -- evaluation ------------------------------------------------------------------------------


def _evaluate(flags: list[dict[str, Any]], distinct_id: str = "user-1", **kw: Any) -> dict:
    compiled = compile_flags(flags, {}, {"0": "company"})
    return {r.key: r for r in evaluate(compiled, EvalRequest(distinct_id=distinct_id, **kw))}


def _rollout_miss_id(key: str, percentage: float) -> str:
    from tests.unit.buckets import flag_bucket

    return next(f"id-{n}" for n in range(1000) if flag_bucket(key, f"id-{n}") > percentage / 100)


def test_early_exit_stops_at_a_rollout_miss() -> None:
    conditions = [
        {
            "properties": [{"key": "plan", "type": "person", "value": "pro"}],
            "rollout_percentage": 10,
        },
        {"properties": [], "rollout_percentage": 100},
    ]
    flag: dict[str, Any] = {"id": 1, "key": "exit", "filters": {"groups": conditions}}
    who = _rollout_miss_id("exit", 10)
    later = _evaluate([flag], who, person_properties={"plan": "pro"})["exit"]
    assert (later.enabled, later.reason_code, later.condition_index) == (
        True,
        "condition_match",
        1,
    )
    flag["filters"]["early_exit"] = True
    stopped = _evaluate([flag], who, person_properties={"plan": "pro"})["exit"]
    assert (stopped.enabled, stopped.reason_code, stopped.condition_index) == (
        False,
        "out_of_rollout_bound",
        0,
    )
    # Properties that do not match still let later conditions decide.
    other = _evaluate([flag], who, person_properties={"plan": "free"})["exit"]
    assert (other.enabled, other.condition_index) == (True, 1)


def test_an_empty_distinct_id_hashes_to_zero() -> None:
    flags = [
        {
            "id": 1,
            "key": "tiny",
            "filters": {"groups": [{"properties": [], "rollout_percentage": 1}]},
        },
        {
            "id": 2,
            "key": "multi",
            "filters": {
                "groups": [{"properties": [], "rollout_percentage": 100}],
                "multivariate": {
                    "variants": [
                        {"key": "first", "rollout_percentage": 50},
                        {"key": "second", "rollout_percentage": 50},
                    ]
                },
            },
        },
    ]
    results = _evaluate(flags, "")
    assert results["tiny"].enabled is True  # bucket 0.0 is inside any positive rollout
    assert results["multi"].variant == "first"


def _depends_on(flag_id: int, key: str, on: int) -> dict[str, Any]:
    prop = {"key": str(on), "type": "flag", "value": True, "operator": "flag_evaluates_to"}
    return {
        "id": flag_id,
        "key": key,
        "filters": {"groups": [{"properties": [prop], "rollout_percentage": 100}]},
    }


def test_flags_in_a_dependency_cycle_are_left_out() -> None:
    flags = [
        _depends_on(1, "ping", 2),
        _depends_on(2, "pong", 1),
        _depends_on(3, "after-cycle", 1),
        _depends_on(4, "self", 4),
        {"id": 5, "key": "free", "filters": {"groups": [{"rollout_percentage": 100}]}},
        _depends_on(6, "after-free", 5),
    ]
    compiled = compile_flags(flags, {}, {})
    assert compiled.has_dependency_cycle
    results = _evaluate(flags)
    assert set(results) == {"after-cycle", "free", "after-free"}
    assert results["after-cycle"].reason_code == "missing_dependency"
    assert results["free"].enabled and results["after-free"].enabled
    asked = _evaluate(flags, flag_keys=["after-cycle", "ping"])
    assert set(asked) == {"after-cycle"}
