"""Property operators compiled once per filter into small test functions.

``compile_test(operator, value)`` returns ``(test, if_missing)``: ``test(v)`` decides a
present property value, ``if_missing`` is the result when the key is absent (true only for
the negative operators). All parsing of the filter value happens here, at compile time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from operator import eq, ge, gt, le, lt, ne
from typing import Any

from flagstaff.flags import dates, semver
from flagstaff.flags.regex import compile_search
from flagstaff.flags.values import (
    ASCII_LOWER,
    ascii_lower,
    is_boolean_like,
    is_truthy,
    json_text,
    to_number,
    to_text,
)

Test = Callable[[Any], bool]

EQUALITY_OPERATORS = frozenset({"exact", "is_not"})
TEXT_OPERATORS = frozenset(
    {
        "icontains",
        "not_icontains",
        "starts_with",
        "not_starts_with",
        "ends_with",
        "not_ends_with",
    }
)
REGEX_OPERATORS = frozenset({"regex", "not_regex"})
NUMERIC_OPERATORS = frozenset({"gt", "gte", "lt", "lte"})
RANGE_OPERATORS = frozenset({"between", "not_between"})
SET_OPERATORS = frozenset({"is_set", "is_not_set"})
DATE_OPERATORS = frozenset({"is_date_before", "is_date_after", "is_date_exact"})
SEMVER_COMPARISONS = frozenset(
    {"semver_eq", "semver_neq", "semver_gt", "semver_gte", "semver_lt", "semver_lte"}
)
SEMVER_RANGES = frozenset({"semver_tilde", "semver_caret", "semver_wildcard"})
MULTI_OPERATORS = frozenset({"icontains_multi", "not_icontains_multi"})
COHORT_OPERATORS = frozenset({"in", "not_in"})
FLAG_OPERATORS = frozenset({"flag_evaluates_to"})

PROPERTY_OPERATORS = (
    EQUALITY_OPERATORS
    | TEXT_OPERATORS
    | REGEX_OPERATORS
    | NUMERIC_OPERATORS
    | RANGE_OPERATORS
    | SET_OPERATORS
    | DATE_OPERATORS
    | SEMVER_COMPARISONS
    | SEMVER_RANGES
    | MULTI_OPERATORS
)
ALL_OPERATORS = PROPERTY_OPERATORS | COHORT_OPERATORS | FLAG_OPERATORS
NEGATIVE_OPERATORS = frozenset(
    {
        "is_not",
        "not_icontains",
        "not_starts_with",
        "not_ends_with",
        "not_regex",
        "not_between",
        "is_not_set",
        "not_icontains_multi",
    }
)


def never(_value: Any) -> bool:
    return False


def always(_value: Any) -> bool:
    return True


def _lower_text(value: Any) -> str:
    return (value if type(value) is str else json_text(value)).lower()


# The tests below are called once per filter per request: each is one function with the
# value conversions written inline, and the negative operators negate inside it.


def _equality(value: Any, negate: bool) -> Test:
    if value == []:
        return (lambda v: not is_truthy(v)) if negate else is_truthy
    if is_boolean_like(value):
        wanted = is_truthy(value) != negate
        if wanted:
            return lambda v: v is True or (type(v) is not bool and is_truthy(v))
        return lambda v: v is False or (type(v) is not bool and not is_truthy(v))
    if isinstance(value, list):
        choices = frozenset(_lower_text(item) for item in value)
        if negate:
            return lambda v: (v if type(v) is str else json_text(v)).lower() not in choices
        return lambda v: (v if type(v) is str else json_text(v)).lower() in choices
    target = _lower_text(value)
    if negate:
        return lambda v: (v if type(v) is str else json_text(v)).lower() != target
    return lambda v: (v if type(v) is str else json_text(v)).lower() == target


def _text(operator: str, value: Any) -> Test:
    needle = ascii_lower(to_text(value))
    negate = operator.startswith("not_")
    if operator.endswith("icontains"):

        def contains(v: Any) -> bool:
            text = v if type(v) is str else json_text(v)
            lowered = text.lower() if text.isascii() else text.translate(ASCII_LOWER)
            return (needle in lowered) != negate

        return contains
    check = str.startswith if operator.endswith("starts_with") else str.endswith

    def test(v: Any) -> bool:
        text = v if type(v) is str else json_text(v)
        lowered = text.lower() if text.isascii() else text.translate(ASCII_LOWER)
        return check(lowered, needle) != negate

    return test


def _multi(value: Any, negate: bool) -> Test:
    items = value if isinstance(value, list) else [value]
    needles = tuple(ascii_lower(to_text(item)) for item in items)

    def test(v: Any) -> bool:
        haystack = ascii_lower(to_text(v))
        return any(needle in haystack for needle in needles) != negate

    return test


def _numeric(operator: str, value: Any) -> Test:
    bound = to_number(value)
    if bound is None:
        return never
    if operator == "gt":
        return lambda v: (n := to_number(v)) is not None and n > bound
    if operator == "gte":
        return lambda v: (n := to_number(v)) is not None and n >= bound
    if operator == "lt":
        return lambda v: (n := to_number(v)) is not None and n < bound
    return lambda v: (n := to_number(v)) is not None and n <= bound


def _range(operator: str, value: Any) -> Test:
    if not isinstance(value, list) or len(value) != 2:
        return never
    low, high = to_number(value[0]), to_number(value[1])
    if low is None or high is None or low > high:
        return never
    inside = operator == "between"

    def test(v: Any) -> bool:
        number = to_number(v)
        if number is None:
            return False
        return (low <= number <= high) == inside

    return test


def _date_bound(value: Any) -> Callable[[], datetime | None] | None:
    if not isinstance(value, str):
        return None
    relative = dates.parse_relative(value)
    if relative is None:
        fixed = dates.parse_absolute(value)
        if fixed is None:
            return None
        return lambda: fixed
    amount, unit = relative
    cache: list[Any] = [None, None]

    def bound() -> datetime | None:
        dates.CLOCK.count += 1
        second = int(time.time())
        if cache[0] != second:
            cache[0] = second
            cache[1] = dates.resolve_relative(amount, unit, datetime.now(UTC))
        return cache[1]

    return bound


def _date(operator: str, value: Any) -> Test:
    bound = _date_bound(value)
    if bound is None:
        return never

    compare = {"is_date_before": lt, "is_date_after": gt}.get(operator, eq)

    def test(v: Any) -> bool:
        moment = dates.parse_property_date(v)
        if moment is None:
            return False
        limit = bound()
        return limit is not None and compare(moment, limit)

    return test


def _semver(operator: str, value: Any) -> Test:
    parse = semver.parse_version

    if operator in SEMVER_RANGES:
        if operator == "semver_tilde":
            bounds = semver.tilde_bounds(value)
        elif operator == "semver_caret":
            bounds = semver.caret_bounds(value)
        else:
            bounds = semver.wildcard_bounds(value)
        if bounds is None:
            return never
        contains = bounds.contains
        return lambda v: (p := parse(v)) is not None and contains(p)
    version = semver.parse_version(value)
    if version is None:
        return never
    compare = {
        "semver_eq": eq,
        "semver_neq": ne,
        "semver_gt": gt,
        "semver_gte": ge,
        "semver_lt": lt,
        "semver_lte": le,
    }[operator]
    return lambda v: (p := parse(v)) is not None and compare(p, version)


def _regex(operator: str, value: Any) -> Test:
    search = compile_search(to_text(value))
    if search is None:
        return never
    # An undecided search (over its budget, see flags/regex.py) matches neither operator.
    if operator == "regex":
        return lambda v: search(v if type(v) is str else json_text(v)) is True
    return lambda v: search(v if type(v) is str else json_text(v)) is False


def compile_test(operator: str, value: Any) -> tuple[Test, bool]:
    """(test for a present value, result for an absent key). Unknown operators never match."""
    if_missing = operator in NEGATIVE_OPERATORS
    if operator in SET_OPERATORS:
        return (always if operator == "is_set" else never), if_missing
    if value is None or operator not in PROPERTY_OPERATORS:
        return never, False
    if operator in EQUALITY_OPERATORS:
        return _equality(value, operator == "is_not"), if_missing
    if operator in TEXT_OPERATORS:
        return _text(operator, value), if_missing
    if operator in MULTI_OPERATORS:
        return _multi(value, operator.startswith("not_")), if_missing
    if operator in REGEX_OPERATORS:
        return _regex(operator, value), if_missing
    if operator in NUMERIC_OPERATORS:
        return _numeric(operator, value), False
    if operator in RANGE_OPERATORS:
        return _range(operator, value), if_missing
    if operator in DATE_OPERATORS:
        return _date(operator, value), False
    return _semver(operator, value), False
