"""Seeded random flag definitions and evaluation inputs, for differential tests.

``generate_case(rng)`` returns ``(flags, cohorts, group_type_mapping, distinct_id,
person_properties, groups, group_properties)`` with flags in PostHog's stored shape
(flag dependencies name the other flag by id). The same cases can be run through the
engine, through posthog-python's local evaluator (see ``flagstaff.flags.local_evaluation``)
or through the HTTP server.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from posthog import feature_flags as posthog_feature_flags

from flagstaff.flags import semver as flag_semver

GROUP_TYPE_MAPPING = {"0": "company", "1": "project"}

WORDS = ["alpha", "Beta", "gamma", "DELTA", "posthog", "flag", "Ünïcode", "test@example.com"]
COUNTRIES = ["US", "us", "GB", "de", "FR"]
VERSIONS = ["1.0.0", "1.2.3", "v2.0", "2.1.5", "0.9", "1.2", "3.0.0-beta", "10.4.1"]
DATES = [
    "2023-01-15",
    "2024-06-01T12:00:00Z",
    "2024-06-01T12:00:00+02:00",
    "2025-12-31 23:59:59",
    "2020-02-29",
]
RELATIVE_DATES = ["-7d", "-2h", "-1w", "-3m", "-1y", "30d"]
PERSON_KEYS = ["email", "country", "plan", "age", "score", "app_version", "signup", "beta"]
GROUP_KEYS = ["name", "seats", "tier", "created"]

SDK_OPERATORS = [
    "exact",
    "is_not",
    "is_set",
    "is_not_set",
    "icontains",
    "not_icontains",
    "regex",
    "not_regex",
    "starts_with",
    "not_starts_with",
    "ends_with",
    "not_ends_with",
    "gt",
    "gte",
    "lt",
    "lte",
    "is_date_before",
    "is_date_after",
    "semver_eq",
    "semver_neq",
    "semver_gt",
    "semver_gte",
    "semver_lt",
    "semver_lte",
    "semver_tilde",
    "semver_caret",
    "semver_wildcard",
]
SERVER_ONLY_OPERATORS = ["icontains_multi", "not_icontains_multi", "between", "not_between"]
REGEXES = ["^al", "a.*a", "[0-9]+", "(?i)beta", "com$", "^(US|GB)$", "x|y|z", "", "[", "(?=a)"]


def random_value(rng: random.Random, key: str) -> Any:
    """A property value of the kind stored under ``key``."""
    roll = rng.random()
    if roll < 0.04:
        return None
    if key in ("age", "score", "seats"):
        number = rng.choice([0, 1, 5, 17, 18, 21, 42, 99.5, -3, 1000])
        return str(number) if rng.random() < 0.3 else number
    if key in ("app_version",):
        return rng.choice(VERSIONS)
    if key in ("signup", "created"):
        return rng.choice(DATES)
    if key == "beta":
        return rng.choice([True, False, "true", "False", "TRUE"])
    if key == "country":
        return rng.choice(COUNTRIES)
    if key == "tier":
        return rng.choice(["free", "pro", "Enterprise"])
    if roll < 0.08:
        return [rng.choice(WORDS), rng.choice(WORDS)]
    return rng.choice(WORDS)


def _filter_value(rng: random.Random, operator: str, key: str) -> Any:
    if operator in ("is_set", "is_not_set"):
        return "is_set"
    if operator in ("regex", "not_regex"):
        return rng.choice(REGEXES)
    if operator in ("gt", "gte", "lt", "lte"):
        return rng.choice([0, 5, 18, "21", 42.5, 100])
    if operator in ("between", "not_between"):
        low = rng.choice([0, 10, 18])
        return [low, low + rng.choice([0, 5, 50])]
    if operator.startswith("is_date"):
        return rng.choice(DATES + RELATIVE_DATES)
    if operator.startswith("semver"):
        if operator == "semver_wildcard":
            return rng.choice(["1.*", "1.2.*", "2.*", "10.*"])
        return rng.choice(["1.0.0", "1.2.0", "2.0.0", "0.9.0", "1.2.3"])
    if operator.endswith("icontains_multi"):
        return [rng.choice(WORDS)[:3], rng.choice(WORDS)[-2:]]
    value = random_value(rng, key)
    if value is None:
        value = rng.choice(WORDS)
    if operator in ("exact", "is_not") and rng.random() < 0.25:
        return [random_value(rng, key) or "x", rng.choice(WORDS)]
    if operator in ("icontains", "not_icontains", "starts_with", "ends_with"):
        text = str(value)
        return text[: rng.randint(1, max(1, len(text)))].upper() if rng.random() < 0.5 else text
    return value


def random_property(rng: random.Random, keys: list[str], server_only: bool) -> dict[str, Any]:
    operators = SDK_OPERATORS + (SERVER_ONLY_OPERATORS if server_only else [])
    key = rng.choice(keys)
    operator = rng.choice(operators)
    return {"key": key, "operator": operator, "value": _filter_value(rng, operator, key)}


def _property_group(rng: random.Random, depth: int, earlier_cohorts: list[int]) -> dict[str, Any]:
    values: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if depth < 2 and roll < 0.25:
            values.append(_property_group(rng, depth + 1, earlier_cohorts))
        elif earlier_cohorts and roll < 0.35:
            values.append(
                {
                    "key": "id",
                    "type": "cohort",
                    "value": rng.choice(earlier_cohorts),
                    "negation": rng.random() < 0.3,
                }
            )
        else:
            prop = random_property(rng, PERSON_KEYS, server_only=False)
            prop["type"] = "person"
            prop["negation"] = rng.random() < 0.2
            values.append(prop)
    return {"type": rng.choice(["AND", "OR"]), "values": values}


def generate_cohorts(rng: random.Random, first_id: int = 100) -> dict[str, dict[str, Any]]:
    cohorts: dict[str, dict[str, Any]] = {}
    ids: list[int] = []
    for offset in range(rng.randint(0, 3)):
        cohort_id = first_id + offset
        cohorts[str(cohort_id)] = {
            "id": cohort_id,
            "is_static": False,
            "filters": {"properties": _property_group(rng, 0, list(ids))},
        }
        ids.append(cohort_id)
    return cohorts


def _variants(rng: random.Random, key: str) -> list[dict[str, Any]]:
    count = rng.randint(2, 4)
    cuts = sorted(rng.sample(range(1, 100), count - 1))
    weights = [b - a for a, b in zip([0, *cuts], [*cuts, 100], strict=True)]
    if rng.random() < 0.1:
        weights[-1] = max(0, weights[-1] - 10)
    return [
        {"key": f"{key}-v{i}", "name": f"Variant {i}", "rollout_percentage": weight}
        for i, weight in enumerate(weights)
    ]


def generate_flag(
    rng: random.Random,
    flag_id: int,
    earlier: list[dict[str, Any]],
    cohort_ids: list[int],
) -> dict[str, Any]:
    key = f"flag-{flag_id}"
    group_flag = rng.random() < 0.2
    aggregation = rng.choice([0, 1]) if group_flag else None
    variants = _variants(rng, key) if rng.random() < 0.3 else None
    conditions = []
    for _ in range(rng.randint(0, 3) if rng.random() < 0.1 else rng.randint(1, 3)):
        condition: dict[str, Any] = {
            "properties": [],
            "rollout_percentage": rng.choice([None, 0, 10, 33.3, 50, 75, 100, rng.uniform(0, 100)]),
        }
        condition_aggregation = aggregation
        if not group_flag and rng.random() < 0.12:
            condition_aggregation = rng.choice([0, 1])
            condition["aggregation_group_type_index"] = condition_aggregation
        for _ in range(rng.randint(0, 3)):
            roll = rng.random()
            if condition_aggregation is not None:
                prop = random_property(rng, GROUP_KEYS, server_only=rng.random() < 0.1)
                prop["type"] = "group"
                prop["group_type_index"] = condition_aggregation
            elif cohort_ids and roll < 0.15:
                prop = {
                    "key": "id",
                    "type": "cohort",
                    "value": rng.choice(cohort_ids),
                    "operator": rng.choice(["in", "not_in"]),
                }
            elif earlier and roll < 0.3:
                target = rng.choice(earlier)
                target_variants = (target["filters"].get("multivariate") or {}).get("variants")
                expected: Any = rng.choice([True, False])
                if target_variants and rng.random() < 0.5:
                    expected = rng.choice(target_variants)["key"]
                prop = {
                    "key": str(target["id"]),
                    "type": "flag",
                    "value": expected,
                    "operator": "flag_evaluates_to",
                }
            else:
                prop = random_property(rng, PERSON_KEYS, server_only=rng.random() < 0.1)
                prop["type"] = "person"
            condition["properties"].append(prop)
        if variants and rng.random() < 0.3:
            condition["variant"] = rng.choice([*(v["key"] for v in variants), "not-a-variant"])
        conditions.append(condition)
    filters: dict[str, Any] = {
        "groups": conditions,
        "multivariate": {"variants": variants} if variants else None,
        "aggregation_group_type_index": aggregation,
    }
    if rng.random() < 0.3:
        payloads = {"true": '{"on": true}'} if not variants else {}
        for variant in variants or []:
            if rng.random() < 0.7:
                payloads[variant["key"]] = f'"{variant["key"]} payload"'
        filters["payloads"] = payloads
    if not group_flag and rng.random() < 0.1:
        filters["holdout"] = {"id": rng.randint(1, 9), "exclusion_percentage": rng.choice([10, 50])}
    flag: dict[str, Any] = {
        "id": flag_id,
        "key": key,
        "name": f"Flag {flag_id}",
        "active": rng.random() > 0.08,
        "deleted": False,
        "version": rng.randint(1, 5),
        "ensure_experience_continuity": False,
        "filters": filters,
    }
    if not group_flag and rng.random() < 0.08:
        flag["bucketing_identifier"] = "device_id"
    return flag


def generate_flags(
    rng: random.Random, cohorts: dict[str, dict[str, Any]], count: int
) -> list[dict[str, Any]]:
    cohort_ids = [cohort["id"] for cohort in cohorts.values()]
    flags: list[dict[str, Any]] = []
    for flag_id in range(1, count + 1):
        flags.append(generate_flag(rng, flag_id, flags, cohort_ids))
    return flags


def generate_inputs(
    rng: random.Random,
) -> tuple[str, dict[str, Any], dict[str, str], dict[str, dict[str, Any]]]:
    """(distinct_id, person_properties, groups, group_properties)."""
    distinct_id = rng.choice(["user", "anon", "id"]) + "-" + str(rng.randint(0, 10**6))
    person = {key: random_value(rng, key) for key in PERSON_KEYS if rng.random() < 0.85}
    groups: dict[str, str] = {}
    group_properties: dict[str, dict[str, Any]] = {}
    for name in GROUP_TYPE_MAPPING.values():
        if rng.random() < 0.7:
            groups[name] = f"{name}-{rng.randint(0, 1000)}"
            group_properties[name] = {
                key: random_value(rng, key) for key in GROUP_KEYS if rng.random() < 0.85
            }
    return distinct_id, person, groups, group_properties


def generate_case(
    rng: random.Random, flag_count: int | None = None
) -> tuple[
    list[dict[str, Any]],
    dict[str, dict[str, Any]],
    dict[str, str],
    str,
    dict[str, Any],
    dict[str, str],
    dict[str, dict[str, Any]],
]:
    cohorts = generate_cohorts(rng)
    flags = generate_flags(rng, cohorts, flag_count or rng.randint(1, 6))
    distinct_id, person, groups, group_properties = generate_inputs(rng)
    return (
        flags,
        cohorts,
        dict(GROUP_TYPE_MAPPING),
        distinct_id,
        person,
        groups,
        group_properties,
    )


def _sdk_version_reading(value: Any) -> flag_semver.Version | None:
    try:
        major, minor, patch = posthog_feature_flags.parse_semver(value)
    except Exception:
        return None
    return flag_semver.Version(major, minor, patch, flag_semver.RELEASE, ())


@contextmanager
def sdk_version_reading() -> Iterator[None]:
    """While compiling: read versions as posthog-python does, not as the server does.

    Semver filters follow the server (``3.0.0-beta`` is below ``3.0.0``; ``1.2.3.4`` and
    ``2025-12-31 23:59:59`` are not versions); posthog-python reads the first three numbers.
    Differential tests compare the SDK with the engine compiled this way, and count where
    the two readings give different answers.
    """
    original = flag_semver.parse_version
    flag_semver.parse_version = _sdk_version_reading
    try:
        yield
    finally:
        flag_semver.parse_version = original
