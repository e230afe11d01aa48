"""Flag engine benchmark: this engine against posthog-python's local evaluator.

50 flags of realistic shape (rollouts, a few person properties each, 5 multivariate
flags, 3 cohorts, a group flag, flag dependencies), evaluated for many persons. Prints
microseconds per request and per flag for both, in one run, and their ratio.

Run: ``python -m bench.engine [persons]``
"""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from posthog import Client

from flagstaff.flags import EvalRequest, compile_flags, evaluate
from flagstaff.flags.local_evaluation import local_evaluation_cohorts, local_evaluation_flags

MAPPING = {"0": "company"}
COUNTRIES = ["US", "GB", "DE", "FR", "IN", "BR"]
PLANS = ["free", "pro", "enterprise"]


def _condition(properties: list[dict[str, Any]], rollout: float | None) -> dict[str, Any]:
    return {"properties": properties, "rollout_percentage": rollout}


def _person(key: str, operator: str, value: Any) -> dict[str, Any]:
    return {"key": key, "type": "person", "operator": operator, "value": value}


def build_definitions(
    rng: random.Random,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    cohorts = {
        "1": {
            "id": 1,
            "is_static": False,
            "filters": {
                "properties": {
                    "type": "OR",
                    "values": [
                        {
                            "type": "AND",
                            "values": [_person("plan", "exact", ["pro", "enterprise"])],
                        },
                        {"type": "AND", "values": [_person("email", "icontains", "@example.com")]},
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
                    "values": [_person("age", "gte", 18), _person("country", "is_not", "FR")],
                }
            },
        },
        "3": {
            "id": 3,
            "is_static": False,
            "filters": {
                "properties": {
                    "type": "AND",
                    "values": [
                        _person("app_version", "semver_gte", "2.0.0"),
                        {"key": "id", "type": "cohort", "value": 2, "negation": False},
                    ],
                }
            },
        },
    }
    flags: list[dict[str, Any]] = []

    def add(filters: dict[str, Any]) -> None:
        flag_id = len(flags) + 1
        flags.append(
            {
                "id": flag_id,
                "key": f"bench-flag-{flag_id}",
                "name": f"Bench flag {flag_id}",
                "active": True,
                "deleted": False,
                "version": 1,
                "ensure_experience_continuity": False,
                "filters": {"multivariate": None, "payloads": {}, **filters},
            }
        )

    for _ in range(20):
        add({"groups": [_condition([], rng.choice([5, 20, 50, 80, 100]))]})
    property_pool = [
        _person("country", "exact", ["US", "GB"]),
        _person("email", "icontains", "example"),
        _person("age", "gt", 30),
        _person("plan", "is_not", "free"),
        _person("beta", "exact", ["true"]),
        _person("app_version", "semver_gte", "1.5.0"),
        _person("email", "regex", r"^[a-m].*@"),
        _person("signup", "is_date_after", "2023-06-01"),
        _person("name", "is_set", "is_set"),
    ]
    for _ in range(15):
        conditions = [
            _condition(rng.sample(property_pool, rng.randint(1, 3)), rng.choice([None, 50]))
            for _ in range(rng.randint(1, 2))
        ]
        add({"groups": conditions, "payloads": {"true": '{"enabled": true}'}})
    for index in range(5):
        variants = [
            {"key": "control", "rollout_percentage": 50},
            {"key": "test", "rollout_percentage": 50},
        ]
        if index % 2:
            variants = [
                {"key": "a", "rollout_percentage": 34},
                {"key": "b", "rollout_percentage": 33},
                {"key": "c", "rollout_percentage": 33},
            ]
        add(
            {
                "groups": [_condition(rng.sample(property_pool, 1), 100)],
                "multivariate": {"variants": variants},
                "payloads": {variants[0]["key"]: '{"copy": "hello"}'},
            }
        )
    for cohort_id in (1, 2, 3):
        add(
            {
                "groups": [
                    _condition(
                        [{"key": "id", "type": "cohort", "value": cohort_id, "operator": "in"}],
                        100,
                    )
                ]
            }
        )
    add(
        {
            "aggregation_group_type_index": 0,
            "groups": [
                _condition(
                    [
                        {
                            "key": "seats",
                            "type": "group",
                            "group_type_index": 0,
                            "operator": "gte",
                            "value": 10,
                        }
                    ],
                    60,
                )
            ],
        }
    )
    while len(flags) < 50:
        target = rng.randint(21, 35)
        add(
            {
                "groups": [
                    _condition(
                        [
                            {
                                "key": str(target),
                                "type": "flag",
                                "operator": "flag_evaluates_to",
                                "value": True,
                            }
                        ],
                        70,
                    )
                ]
            }
        )
    return flags, cohorts


def build_people(
    rng: random.Random, count: int
) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    people = []
    for number in range(count):
        properties: dict[str, Any] = {
            "email": f"{rng.choice('abcdefghijklmnopqrstuvwxyz')}user{number}@"
            + rng.choice(["example.com", "mail.org"]),
            "country": rng.choice(COUNTRIES),
            "plan": rng.choice(PLANS),
            "age": rng.randint(12, 80),
            "beta": rng.choice([True, False]),
            "app_version": f"{rng.randint(1, 3)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}",
            "signup": f"202{rng.randint(1, 4)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
            "name": f"User {number}",
        }
        groups = {"company": f"company-{rng.randint(1, 50)}"} if rng.random() < 0.5 else {}
        people.append((f"person-{number}", properties, groups))
    return people


def _time(run: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def main(persons: int = 2000) -> None:
    rng = random.Random(7)
    flags, cohorts = build_definitions(rng)
    people = build_people(rng, persons)
    group_properties = {"company": {"seats": 25}}

    compile_started = time.perf_counter()
    compiled = compile_flags(flags, cohorts, MAPPING)
    compile_ms = (time.perf_counter() - compile_started) * 1000
    # Again, as at the next definitions version: generated code is reused by source text.
    recompile_started = time.perf_counter()
    compile_flags(flags, cohorts, MAPPING)
    recompile_ms = (time.perf_counter() - recompile_started) * 1000
    requests = [
        EvalRequest(
            distinct_id=distinct_id,
            person_properties=properties,
            groups=groups,
            group_properties={name: group_properties["company"] for name in groups},
        )
        for distinct_id, properties, groups in people
    ]

    def run_engine() -> None:
        for request in requests:
            evaluate(compiled, request)

    logging.getLogger("posthog").setLevel(logging.CRITICAL)
    client = Client("phc_bench", send=False, sync_mode=True)
    client.feature_flags = local_evaluation_flags(flags)
    client.cohorts = local_evaluation_cohorts(cohorts)
    client.group_type_mapping = MAPPING

    def run_sdk() -> None:
        for distinct_id, properties, groups in people:
            client._get_all_flags_and_payloads_locally(
                distinct_id,
                groups=groups,
                person_properties={"distinct_id": distinct_id, **properties},
                group_properties={
                    name: {"$group_key": key, **group_properties["company"]}
                    for name, key in groups.items()
                },
            )

    engine_seconds = _time(run_engine)
    sdk_seconds = _time(run_sdk)
    flag_count = len(flags)
    engine_request_us = engine_seconds / persons * 1e6
    sdk_request_us = sdk_seconds / persons * 1e6
    print(f"{flag_count} flags, {len(cohorts)} cohorts, {persons} persons (best of 3 runs)")
    print(f"compile_flags: {compile_ms:.2f} ms (again: {recompile_ms:.2f} ms)")
    for label, per_request in (
        ("flagstaff     ", engine_request_us),
        ("posthog-python", sdk_request_us),
    ):
        per_flag = per_request / flag_count
        print(f"{label}: {per_request:8.1f} us/request {per_flag:6.2f} us/flag")
    print(f"ratio          : posthog-python / flagstaff = {sdk_seconds / engine_seconds:.1f}x")

    simple = compile_flags(
        [
            {
                "id": n,
                "key": f"rollout-{n}",
                "active": True,
                "filters": {
                    "groups": [
                        {"properties": [], "rollout_percentage": (5, 20, 50, 80, 100)[n % 5]}
                    ]
                },
            }
            for n in range(flag_count)
        ],
        {},
        {},
    )
    plain = [EvalRequest(distinct_id=request.distinct_id) for request in requests]
    simple_seconds = _time(lambda: [evaluate(simple, request) for request in plain])
    simple_us = simple_seconds / persons / flag_count * 1e6
    print(f"flagstaff, {flag_count} rollout-only flags: {simple_us:.2f} us/flag")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
