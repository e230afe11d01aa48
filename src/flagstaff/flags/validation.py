"""Validation of flag definitions for the management API.

Rules follow PostHog's feature flag API: keys use letters, digits, ``-`` and ``_`` (at
most 400 characters); rollout percentages lie in 0..100; variant weights sum to 100 with
unique keys; payload values are JSON text (a non-string JSON value is accepted too, as
PostHog's API does, and is served as its JSON text); operators must be known.
"""

from __future__ import annotations

import json
import re
from typing import Any

from flagstaff.common.invalid import Errors
from flagstaff.common.json_types import is_number
from flagstaff.common.limits import MAX_GROUP_TYPES, MAX_KEY_LENGTH
from flagstaff.flags import dates
from flagstaff.flags.operators import (
    ALL_OPERATORS,
    DATE_OPERATORS,
    NUMERIC_OPERATORS,
    RANGE_OPERATORS,
    REGEX_OPERATORS,
    SEMVER_COMPARISONS,
    SEMVER_RANGES,
)
from flagstaff.flags.regex import is_valid_pattern
from flagstaff.flags.values import to_number, to_text

SEMVER_OPERATORS = SEMVER_COMPARISONS | SEMVER_RANGES


KEY_PATTERN = re.compile(r"[a-zA-Z0-9_-]+")
PROPERTY_TYPES = frozenset({"person", "group", "cohort", "flag"})
RUNTIMES = frozenset({"server", "client", "all"})
BUCKETING_IDENTIFIERS = frozenset({"distinct_id", "device_id"})


def _check_percentage(path: str, value: Any, errors: Errors, *, nullable: bool) -> None:
    if value is None:
        if not nullable:
            errors.append((path, "This field is required."))
        return
    if not is_number(value):
        errors.append((path, "Must be a number."))
    elif not 0 <= value <= 100:
        errors.append((path, "Must be between 0 and 100."))


def _check_group_index(path: str, value: Any, errors: Errors) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        errors.append((path, "Must be an integer or null."))
    elif not 0 <= value < MAX_GROUP_TYPES:
        errors.append((path, f"Must be between 0 and {MAX_GROUP_TYPES - 1}."))


def _is_date(value: Any) -> bool:
    return isinstance(value, str) and (
        dates.parse_relative(value) is not None or dates.parse_absolute(value) is not None
    )


def _check_operator_value(path: str, operator: str, value: Any, errors: Errors) -> None:
    if operator in REGEX_OPERATORS:
        if value is None or not is_valid_pattern(to_text(value)):
            errors.append((f"{path}.value", "Invalid regular expression."))
    elif operator in NUMERIC_OPERATORS or operator in SEMVER_OPERATORS:
        # PostHog's server stores any scalar here; one that is not a number (a version)
        # never matches.
        if value is None or isinstance(value, dict | list):
            errors.append((f"{path}.value", "Must be a number or a string."))
    elif operator in RANGE_OPERATORS:
        bounds = (
            [to_number(item) for item in value]
            if isinstance(value, list) and len(value) == 2
            else None
        )
        low, high = bounds if bounds is not None else (None, None)
        if low is None or high is None:
            errors.append((f"{path}.value", "Must be a list of two numbers [min, max]."))
        elif low > high:
            errors.append((f"{path}.value", "The minimum must not exceed the maximum."))
    elif operator in DATE_OPERATORS and not _is_date(value):
        errors.append((f"{path}.value", "Must be an ISO 8601 date or a relative date."))


def _check_property(path: str, prop: Any, errors: Errors) -> None:
    if not isinstance(prop, dict):
        errors.append((path, "Must be an object."))
        return
    kind = prop.get("type", "person")
    if kind not in PROPERTY_TYPES:
        errors.append((f"{path}.type", f"Unknown property type {kind!r}."))
        return
    key = prop.get("key")
    if key is None or key == "" or not isinstance(key, str | int) or isinstance(key, bool):
        errors.append((f"{path}.key", "This field is required."))
    operator = prop.get("operator")
    if operator is None:
        operator = (
            "flag_evaluates_to" if kind == "flag" else ("in" if kind == "cohort" else "exact")
        )
    if not isinstance(operator, str) or operator not in ALL_OPERATORS:
        errors.append((f"{path}.operator", f"Unknown operator {operator!r}."))
        return
    value = prop.get("value")
    if kind == "cohort":
        if operator not in ("in", "not_in", "exact"):
            errors.append((f"{path}.operator", "Cohort filters use the in or not_in operator."))
        if not (isinstance(value, int) and not isinstance(value, bool)) and not (
            isinstance(value, str) and value.isdigit()
        ):
            errors.append((f"{path}.value", "Must be a cohort id."))
        return
    if kind == "flag":
        if operator != "flag_evaluates_to":
            errors.append((f"{path}.operator", "Flag filters use the flag_evaluates_to operator."))
        if not isinstance(value, bool | str):
            errors.append((f"{path}.value", "Must be true, false or a variant key."))
        return
    if operator in ("in", "not_in", "flag_evaluates_to"):
        errors.append((f"{path}.operator", f"Operator {operator!r} needs a cohort or flag filter."))
        return
    if kind == "group":
        _check_group_index(f"{path}.group_type_index", prop.get("group_type_index"), errors)
    if operator not in ("is_set", "is_not_set") and value is None:
        errors.append((f"{path}.value", "This field is required."))
        return
    _check_operator_value(path, operator, value, errors)


def _check_condition(path: str, group: Any, variant_keys: set[str] | None, errors: Errors) -> None:
    if not isinstance(group, dict):
        errors.append((path, "Must be an object."))
        return
    properties = group.get("properties")
    if properties is not None and not isinstance(properties, list):
        errors.append((f"{path}.properties", "Must be a list."))
    else:
        for position, prop in enumerate(properties or []):
            _check_property(f"{path}.properties[{position}]", prop, errors)
    _check_percentage(
        f"{path}.rollout_percentage", group.get("rollout_percentage"), errors, nullable=True
    )
    variant = group.get("variant")
    if variant is not None:
        if not isinstance(variant, str):
            errors.append((f"{path}.variant", "Must be a string or null."))
        elif variant_keys is not None and variant not in variant_keys:
            errors.append((f"{path}.variant", f"Variant {variant!r} is not defined."))
    _check_group_index(
        f"{path}.aggregation_group_type_index", group.get("aggregation_group_type_index"), errors
    )


def _check_variants(multivariate: Any, errors: Errors) -> set[str] | None:
    path = "filters.multivariate"
    if multivariate is None:
        return None
    if not isinstance(multivariate, dict) or not isinstance(multivariate.get("variants"), list):
        errors.append((path, "Must be an object with a list of variants."))
        return None
    keys: set[str] = set()
    total = 0.0
    for position, variant in enumerate(multivariate["variants"]):
        variant_path = f"{path}.variants[{position}]"
        if not isinstance(variant, dict):
            errors.append((variant_path, "Must be an object."))
            continue
        key = variant.get("key")
        if not isinstance(key, str) or not key:
            errors.append((f"{variant_path}.key", "This field is required."))
        elif key in keys:
            errors.append((f"{variant_path}.key", f"Duplicate variant key {key!r}."))
        else:
            keys.add(key)
        weight = variant.get("rollout_percentage")
        _check_percentage(f"{variant_path}.rollout_percentage", weight, errors, nullable=False)
        if is_number(weight):
            total += float(weight)
    if multivariate["variants"] and abs(total - 100.0) > 1e-9:
        errors.append((f"{path}.variants", "Variant rollout percentages must sum to 100."))
    return keys


def _check_payloads(payloads: Any, errors: Errors) -> None:
    if payloads is None:
        return
    if not isinstance(payloads, dict):
        errors.append(("filters.payloads", "Must be an object."))
        return
    for key, value in payloads.items():
        if isinstance(value, str):
            try:
                json.loads(value)
            except ValueError:
                errors.append((f"filters.payloads.{key}", "Payload is not valid JSON."))


def _check_filters(filters: Any, errors: Errors) -> None:
    if filters is None:
        return
    if not isinstance(filters, dict):
        errors.append(("filters", "Must be an object."))
        return
    variant_keys = _check_variants(filters.get("multivariate"), errors)
    groups = filters.get("groups")
    if groups is not None and not isinstance(groups, list):
        errors.append(("filters.groups", "Must be a list."))
    else:
        for position, group in enumerate(groups or []):
            _check_condition(f"filters.groups[{position}]", group, variant_keys, errors)
    _check_group_index(
        "filters.aggregation_group_type_index", filters.get("aggregation_group_type_index"), errors
    )
    _check_payloads(filters.get("payloads"), errors)
    holdout = filters.get("holdout")
    if holdout is not None:
        if not isinstance(holdout, dict):
            errors.append(("filters.holdout", "Must be an object."))
        else:
            if not isinstance(holdout.get("id"), int) or isinstance(holdout.get("id"), bool):
                errors.append(("filters.holdout.id", "Must be an integer."))
            _check_percentage(
                "filters.holdout.exclusion_percentage",
                holdout.get("exclusion_percentage"),
                errors,
                nullable=False,
            )


def flag_key_problem(key: Any) -> str | None:
    """What is wrong with a flag key by PostHog's rule (letters, digits, ``-`` and ``_``, at
    most :data:`MAX_KEY_LENGTH` characters), or None. Every way to create a flag (the API,
    the console, ``flags import``, an experiment's flag) goes through it."""
    if not isinstance(key, str) or not key:
        return "This field is required."
    if len(key) > MAX_KEY_LENGTH:
        return f"Ensure this field has no more than {MAX_KEY_LENGTH} characters."
    if not KEY_PATTERN.fullmatch(key):
        return 'Only letters, numbers, hyphens ("-") & underscores ("_") are allowed.'
    return None


def validate_flag(definition: dict[str, Any]) -> list[tuple[str, str]]:
    """(field path, message) for each problem in a flag definition; empty when valid."""
    errors: Errors = []
    if not isinstance(definition, dict):
        return [("", "Must be an object.")]
    key_problem = flag_key_problem(definition.get("key"))
    if key_problem is not None:
        errors.append(("key", key_problem))
    name = definition.get("name")
    if name is not None and not isinstance(name, str):
        errors.append(("name", "Must be a string."))
    for field in ("active", "deleted", "ensure_experience_continuity"):
        if field in definition and not isinstance(definition[field], bool):
            errors.append((field, "Must be a boolean."))
    runtime = definition.get("evaluation_runtime")
    if runtime is not None and runtime not in RUNTIMES:
        errors.append(("evaluation_runtime", "Must be server, client or all."))
    bucketing = definition.get("bucketing_identifier")
    if bucketing is not None and bucketing not in BUCKETING_IDENTIFIERS:
        errors.append(("bucketing_identifier", "Must be distinct_id or device_id."))
    for field in ("evaluation_contexts", "evaluation_tags"):
        tags = definition.get(field)
        if tags is not None and (
            not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags)
        ):
            errors.append((field, "Must be a list of strings."))
    _check_filters(definition.get("filters"), errors)
    return errors
