"""Every property operator, including absent keys, bounded regex, dates and semver."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flagstaff.flags.operators import compile_test

MISSING = object()


def check(operator: str, value: Any, prop: Any) -> bool:
    test, if_missing = compile_test(operator, value)
    return if_missing if prop is MISSING else test(prop)


@pytest.mark.parametrize(
    ("operator", "value", "prop", "expected"),
    [
        ("exact", "Value", "value", True),
        ("exact", "value", "value2", False),
        ("exact", ["US", "CA"], "us", True),
        ("exact", ["US", "CA"], "de", False),
        ("exact", 5, "5", True),
        ("exact", "5", 5, True),
        ("exact", True, "TRUE", True),
        ("exact", "false", False, True),
        ("exact", "true", "yes", False),
        ("exact", [], "x", False),
        ("exact", "null", None, True),
        ("exact", "value", MISSING, False),
        ("is_not", "value", "other", True),
        ("is_not", "value", "VALUE", False),
        ("is_not", ["a", "b"], "c", True),
        ("is_not", "value", MISSING, True),
        ("icontains", "ALU", "value", True),
        ("icontains", "3", 323, True),
        ("icontains", "x", "value", False),
        ("icontains", "x", MISSING, False),
        ("not_icontains", "x", "value", True),
        ("not_icontains", "AL", "value", False),
        ("not_icontains", "x", MISSING, True),
        ("starts_with", "VA", "value", True),
        ("starts_with", "lu", "value", False),
        ("not_starts_with", "lu", "value", True),
        ("not_starts_with", "lu", MISSING, True),
        ("ends_with", "UE", "value", True),
        ("not_ends_with", "UE", "value", False),
        ("not_ends_with", "x", MISSING, True),
        ("icontains_multi", ["zz", "AL"], "value", True),
        ("icontains_multi", ["zz", "yy"], "value", False),
        ("icontains_multi", "al", "value", True),
        ("not_icontains_multi", ["zz", "AL"], "value", False),
        ("not_icontains_multi", ["zz"], MISSING, True),
        ("gt", 5, 6, True),
        ("gt", 5, "6.5", True),
        ("gt", "5", 5, False),
        ("gte", 5, 5, True),
        ("lt", 5, "4", True),
        ("lte", 5, 5.0, True),
        ("lt", 5, "abc", False),
        ("gt", 5, True, False),
        ("gt", "abc", 6, False),
        ("gt", 5, MISSING, False),
        ("between", [1, 10], 10, True),
        ("between", [1, 10], "0.5", False),
        ("between", [10, 1], 5, False),
        ("between", [1], 5, False),
        ("not_between", [1, 10], 11, True),
        ("not_between", [1, 10], 5, False),
        ("not_between", [1, 10], "abc", False),
        ("not_between", [1, 10], MISSING, True),
        ("is_set", "is_set", None, True),
        ("is_set", "is_set", MISSING, False),
        ("is_not_set", "is_not_set", "x", False),
        ("is_not_set", "is_not_set", MISSING, True),
        ("unknown_operator", "x", "x", False),
        ("exact", None, "x", False),
    ],
)
def test_operators(operator: str, value: Any, prop: Any, expected: bool) -> None:
    assert check(operator, value, prop) is expected


@pytest.mark.parametrize(
    ("operator", "pattern", "prop", "expected"),
    [
        ("regex", "^va.*e$", "value", True),
        ("regex", "^va.*e$", "value\n", False),
        ("regex", r"\d+", "abc123", True),
        ("regex", "(?i)VALUE", "value", True),
        ("regex", "", "anything", True),
        ("regex", "[", "[", False),
        ("not_regex", "[", "[", False),
        ("regex", "(?<=a)b", "ab", True),
        ("regex", "(?<=a)b", "cb", False),
        ("not_regex", "(?<=a)b", "cb", True),
        ("regex", r"(\w)\1", "hello", True),
        ("not_regex", "^x", "value", True),
        ("not_regex", "^v", "value", False),
        ("not_regex", "^v", MISSING, True),
        ("regex", "^v", MISSING, False),
        ("regex", "5", 15, True),
    ],
)
def test_regex(operator: str, pattern: str, prop: Any, expected: bool) -> None:
    assert check(operator, pattern, prop) is expected


def test_regex_is_bounded_for_pathological_input() -> None:
    test, _ = compile_test("regex", "(a+)+$")
    started = time.perf_counter()
    assert test("a" * 200_000 + "!") is False
    assert test("a" * 50_000) is True
    assert time.perf_counter() - started < 1.0


def test_dates_absolute_and_naive_is_utc() -> None:
    assert check("is_date_before", "2024-01-02", "2024-01-01T23:59:59Z")
    assert not check("is_date_before", "2024-01-02", "2024-01-02T00:00:01Z")
    assert check("is_date_after", "2024-01-01T00:00:00+02:00", "2023-12-31T22:30:00")
    assert check("is_date_exact", "2024-06-01T12:00:00Z", "2024-06-01 14:00:00+02:00")
    assert not check("is_date_exact", "2024-06-01", "2024-06-01T00:00:01Z")
    assert check("is_date_after", "2020-01-01", 1_700_000_000)
    assert check("is_date_after", "2020-01-01", "1700000000")
    assert not check("is_date_before", "2024-01-01", "not a date")
    assert not check("is_date_before", "not a date", "2020-01-01")
    assert not check("is_date_before", "2024-01-01", MISSING)


@pytest.mark.parametrize(
    ("relative", "delta", "inside"),
    [
        ("-7d", timedelta(days=6), True),
        ("-7d", timedelta(days=8), False),
        ("-2h", timedelta(hours=1), True),
        ("-2h", timedelta(hours=3), False),
        ("-1w", timedelta(days=6), True),
        ("-3m", timedelta(days=80), True),
        ("-3m", timedelta(days=100), False),
        ("-1y", timedelta(days=360), True),
        ("-1y", timedelta(days=370), False),
        ("7d", timedelta(days=6), True),
    ],
)
def test_relative_dates(relative: str, delta: timedelta, inside: bool) -> None:
    moment = (datetime.now(UTC) - delta).isoformat()
    assert check("is_date_after", relative, moment) is inside
    assert check("is_date_before", relative, moment) is not inside


def test_relative_date_out_of_range_never_matches() -> None:
    assert not check("is_date_after", "-10000d", "2024-01-01")
    assert not check("is_date_before", "-10000d", "2024-01-01")


@pytest.mark.parametrize(
    ("operator", "value", "prop", "expected"),
    [
        ("semver_eq", "1.2.3", "v1.2.3", True),
        ("semver_eq", "1.2", "1.2.0", True),
        ("semver_eq", "1.2.3", "1.2.3-beta", False),
        ("semver_neq", "1.2.3", "1.2.4", True),
        ("semver_gt", "1.2.3", "1.10.0", True),
        ("semver_gt", "1.2.3", "1.2.3", False),
        ("semver_gte", "1.2.3", "1.2.3", True),
        ("semver_lt", "2.0.0", "1.99.99", True),
        ("semver_lte", "2.0.0", "2.0.1", False),
        ("semver_gt", "1.0.0", "1.08.0", True),
        ("semver_gt", "1.0.0", "banana", False),
        ("semver_gt", "banana", "1.0.0", False),
        ("semver_gt", "1.0.0", MISSING, False),
        ("semver_neq", "1.0.0", MISSING, False),
        ("semver_tilde", "1.2.3", "1.2.9", True),
        ("semver_tilde", "1.2.3", "1.3.0", False),
        ("semver_tilde", "1.2.3", "1.2.2", False),
        ("semver_caret", "1.2.3", "1.9.0", True),
        ("semver_caret", "1.2.3", "2.0.0", False),
        ("semver_caret", "0.2.3", "0.2.9", True),
        ("semver_caret", "0.2.3", "0.3.0", False),
        ("semver_caret", "0.0.3", "0.0.3", True),
        ("semver_caret", "0.0.3", "0.0.4", False),
        ("semver_wildcard", "1.*", "1.99.0", True),
        ("semver_wildcard", "1.*", "2.0.0", False),
        ("semver_wildcard", "1.2.*", "1.2.7", True),
        ("semver_wildcard", "1.2.*", "1.3.0", False),
        ("semver_wildcard", "*", "1.0.0", True),
    ],
)
def test_semver(operator: str, value: str, prop: Any, expected: bool) -> None:
    assert check(operator, value, prop) is expected
