"""Differential test through the HTTP server: POST /flags?v=2 against posthog-python's local
evaluator, on seeded random cases from tests/flaggen.py.

Each case's cohorts and flags are created through the management API (the server assigns
new ids, so cohort and flag-dependency references are remapped), many cases per project.
Creating definitions costs far more than evaluating them, so each case is evaluated for a few
generated users: once over HTTP per user, with the person and group properties sent as
overrides, and by the SDK on the same definitions. Wherever the SDK reaches a conclusive
answer the server must agree on enabled, variant and payload.

The API rejects what the generator sometimes produces on purpose for the engine tests (an
override naming no variant, a pattern RE2 cannot compile, variant weights under 100%); such
parts are made valid the way a user would have to: the override and the property are
dropped, the last variant takes the missing weight. As in tests/unit/test_flags_oracle.py,
two known differences between server and SDK semantics are left out: a positive SDK answer
reached after it skipped an undecidable condition, and flags depending on group-aggregated
flags (the SDK evaluates those without the request's groups). A third: the server reads
versions for semver filters as PostHog's server does, posthog-python differently for some
values; flags whose answer depends on which reading is used (decided by the engine compiled
with each reading, see ``tests.flaggen.sdk_version_reading``) are counted and left out.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from posthog import Client
from posthog import feature_flags as posthog_feature_flags
from posthog.feature_flags import InconclusiveMatchError, RequiresServerEvaluation

from flagstaff.flags import EvalRequest, compile_flags, evaluate, validate_flag
from flagstaff.flags.local_evaluation import local_evaluation_cohorts, local_evaluation_flags
from tests.flaggen import (
    GROUP_TYPE_MAPPING,
    generate_case,
    generate_inputs,
    sdk_version_reading,
)
from tests.server import Api, Server

CASES = 1500
USERS_PER_CASE = 3
CASES_PER_PROJECT = 500
SEED = 20251122
THREADS = 8


@dataclass
class User:
    distinct_id: str
    person: dict[str, Any]
    groups: dict[str, str]
    group_properties: dict[str, dict[str, Any]]
    device_id: str | None
    server_flags: dict[str, Any] = field(default_factory=dict)
    reading_matters: set[str] = field(default_factory=set)
    """Flags whose answer depends on how semver values are read (see the docstring)."""


@dataclass
class Case:
    number: int
    flags: list[dict[str, Any]]
    cohorts: list[dict[str, Any]]
    users: list[User]


# making generated definitions acceptable to the API ---------------------------------------


def _property_is_valid(prop: dict[str, Any]) -> bool:
    probe = {"key": "probe", "filters": {"groups": [{"properties": [prop]}]}}
    return not validate_flag(probe)


def _valid_property_group(group: dict[str, Any]) -> dict[str, Any]:
    values = []
    for value in group["values"]:
        if "values" in value:
            values.append(_valid_property_group(value))
        elif _property_is_valid(value):
            values.append(value)
    return {**group, "values": values}


def _make_valid(flag: dict[str, Any]) -> None:
    filters = flag["filters"]
    variants = (filters.get("multivariate") or {}).get("variants") or []
    if variants:
        variants[-1]["rollout_percentage"] += 100 - sum(v["rollout_percentage"] for v in variants)
    names = {v["key"] for v in variants}
    for condition in filters["groups"]:
        if condition.get("variant") is not None and condition["variant"] not in names:
            del condition["variant"]
        condition["properties"] = [p for p in condition["properties"] if _property_is_valid(p)]


def make_cases(count: int, rng: random.Random) -> Iterator[Case]:
    """Seeded cases with project-unique flag keys (``c<case>-f<n>``), made valid."""
    for number in range(count):
        flags, cohorts, mapping, *inputs = generate_case(rng)
        assert mapping == GROUP_TYPE_MAPPING
        users = []
        for user in range(USERS_PER_CASE):
            distinct_id, person, groups, group_props = inputs if user == 0 else generate_inputs(rng)
            device_id = rng.choice([None, f"device-{rng.randint(0, 99)}"])
            users.append(User(distinct_id, person, groups, group_props, device_id))
        cohort_list = []
        for cohort in cohorts.values():
            properties = _valid_property_group(cohort["filters"]["properties"])
            cohort_list.append({**cohort, "filters": {"properties": properties}})
        for flag in flags:
            flag["key"] = f"c{number}-f{flag['id']}"
            _make_valid(flag)
            assert not validate_flag(flag), (number, validate_flag(flag))
        yield Case(number, flags, cohort_list, users)


# creating cases through the management API -------------------------------------------------


def _remap_cohort_refs(group: dict[str, Any], ids: dict[int, int]) -> None:
    for value in group["values"]:
        if "values" in value:
            _remap_cohort_refs(value, ids)
        elif value.get("type") == "cohort":
            value["value"] = ids[value["value"]]


def create_case(api: Api, case: Case) -> None:
    """Create the case's cohorts and flags in order; rewrite them with the server's ids."""
    cohort_ids: dict[int, int] = {}
    for cohort in case.cohorts:
        _remap_cohort_refs(cohort["filters"]["properties"], cohort_ids)
        r = api.post(
            "/api/projects/@current/cohorts/",
            json={"name": f"case {case.number}", "filters": cohort["filters"]},
        )
        assert r.status_code == 201, r.text
        cohort_ids[cohort["id"]] = cohort["id"] = r.json()["id"]
    flag_ids: dict[int, int] = {}
    for flag in case.flags:
        for condition in flag["filters"]["groups"]:
            for prop in condition["properties"]:
                if prop["type"] == "cohort":
                    prop["value"] = cohort_ids[prop["value"]]
                elif prop["type"] == "flag":
                    prop["key"] = str(flag_ids[int(prop["key"])])
        body = {k: v for k, v in flag.items() if k not in ("id", "version")}
        r = api.post("/api/projects/@current/feature_flags/", json=body)
        assert r.status_code == 201, r.text
        flag_ids[flag["id"]] = flag["id"] = r.json()["id"]


def new_project(server: Server, http: httpx.Client, project_name: str) -> tuple[str, str]:
    """A project with the generator's group types; returns its token and personal key."""
    r = Api(server.url).post("/api/projects/", json={"name": project_name})
    assert r.status_code == 201, r.text
    token, key = r.json()["api_token"], r.json()["personal_api_key"]
    # Group types are numbered in order of first use: make them match the generator's.
    batch = [
        {
            "event": "$groupidentify",
            "distinct_id": "oracle-admin",
            "properties": {
                "$group_type": group_type,
                "$group_key": "oracle-seed",
                "$group_set": {},
            },
        }
        for _, group_type in sorted(GROUP_TYPE_MAPPING.items())
    ]
    assert http.post("/batch/", json={"api_key": token, "batch": batch}).status_code == 200
    types = Api(server.url, key).get("/api/projects/@current/groups_types/").json()
    assert {str(t["group_type_index"]): t["group_type"] for t in types} == GROUP_TYPE_MAPPING
    return token, key


def create_cases(pool: ThreadPoolExecutor, url: str, key: str, cases: list[Case]) -> None:
    """Cases in parallel (concurrent writes share the store's commits), each one in order."""

    def create_chunk(chunk: list[Case]) -> None:
        api = Api(url, key)
        try:
            for case in chunk:
                create_case(api, case)
        finally:
            api.client.close()

    list(pool.map(create_chunk, [cases[i::THREADS] for i in range(THREADS)]))


def wait_until_served(http: httpx.Client, token: str, key: str, count: int) -> None:
    deadline = time.monotonic() + 10.0
    while True:
        r = http.get(
            f"/flags/definitions?token={token}", headers={"Authorization": f"Bearer {key}"}
        )
        served = r.json()["flags"]
        if len(served) == count:
            return
        assert time.monotonic() < deadline, f"{len(served)} of {count} flags served"
        time.sleep(0.1)


def evaluate_over_http(http: httpx.Client, token: str, case: Case) -> None:
    keys = [flag["key"] for flag in case.flags]
    for user in case.users:
        body: dict[str, Any] = {
            "api_key": token,
            "distinct_id": user.distinct_id,
            "person_properties": user.person,
            "groups": user.groups,
            "group_properties": user.group_properties,
            "flag_keys_to_evaluate": keys,
        }
        if user.device_id is not None:
            body["$device_id"] = user.device_id
        r = http.post("/flags?v=2", json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["errorsWhileComputingFlags"] is False, (case.number, answer)
        user.server_flags = answer["flags"]


# the SDK side ------------------------------------------------------------------------------


def depends_on_group_flag(key: str, by_key: dict[str, dict[str, Any]]) -> bool:
    """Whether ``key`` depends, directly or not, on a flag with group-aggregated conditions."""
    stack = [
        prop["key"]
        for condition in by_key[key]["filters"]["groups"]
        for prop in condition["properties"]
        if prop["type"] == "flag"
    ]
    visited: set[str] = set()
    while stack:
        target = by_key.get(stack.pop())
        if target is None or target["key"] in visited:
            continue
        visited.add(target["key"])
        filters = target["filters"]
        if filters.get("aggregation_group_type_index") is not None:
            return True
        for condition in filters["groups"]:
            if condition.get("aggregation_group_type_index") is not None:
                return True
            stack.extend(p["key"] for p in condition["properties"] if p["type"] == "flag")
    return False


class Oracle:
    """posthog-python's local evaluator, noting when it skipped an undecidable condition."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(logging.getLogger("posthog"), "disabled", True)
        self.client = Client("phc_oracle", send=False, sync_mode=True)
        self.skipped = False
        original = posthog_feature_flags._pick_unresolved_reason

        def note_skip(current: Any, new: Any) -> Any:
            self.skipped = True
            return original(current, new)

        monkeypatch.setattr(posthog_feature_flags, "_pick_unresolved_reason", note_skip)

    def compare(self, case: Case, outcome: Counter[str], mismatches: list[str]) -> None:
        sdk = self.client
        flags = local_evaluation_flags(case.flags)
        sdk.feature_flags = flags
        sdk.cohorts = local_evaluation_cohorts({str(c["id"]): c for c in case.cohorts})
        sdk.group_type_mapping = GROUP_TYPE_MAPPING
        by_key = {flag["key"]: flag for flag in flags}
        cohorts = {str(c["id"]): c for c in case.cohorts}
        server_reading = compile_flags(case.flags, cohorts, GROUP_TYPE_MAPPING)
        with sdk_version_reading():
            sdk_reading = compile_flags(case.flags, cohorts, GROUP_TYPE_MAPPING)
        for user in case.users:
            request = EvalRequest(
                distinct_id=user.distinct_id,
                person_properties=user.person,
                groups=user.groups,
                group_properties=user.group_properties,
                device_id=user.device_id,
            )
            answers = [
                {r.key: (r.enabled, r.variant, r.payload) for r in evaluate(compiled, request)}
                for compiled in (server_reading, sdk_reading)
            ]
            user.reading_matters = {k for k, v in answers[0].items() if answers[1].get(k) != v}
            for flag in flags:
                where = f"case {case.number} user {user.distinct_id} flag {flag['key']}"
                mismatch = self._compare_flag(flag, user, by_key, outcome, where)
                if mismatch is not None:
                    mismatches.append(mismatch)

    def _compare_flag(
        self,
        flag: dict[str, Any],
        user: User,
        by_key: dict[str, dict[str, Any]],
        outcome: Counter[str],
        where: str,
    ) -> str | None:
        answer = user.server_flags.get(flag["key"])
        if not flag["active"]:
            assert answer is None, f"{where}: inactive flag answered"
            outcome["inactive"] += 1
            return None
        assert answer is not None, f"{where}: missing from the answer"
        if depends_on_group_flag(flag["key"], by_key):
            outcome["group_dependency"] += 1
            return None
        if flag["key"] in user.reading_matters:
            outcome["semver_reading_differs"] += 1
            return None
        self.skipped = False
        try:
            expected = self.client._compute_flag_locally(
                flag,
                user.distinct_id,
                groups=user.groups,
                person_properties={"distinct_id": user.distinct_id, **user.person},
                group_properties={
                    name: {"$group_key": key, **user.group_properties.get(name, {})}
                    for name, key in user.groups.items()
                },
                warn_on_unknown_groups=False,
                device_id=user.device_id,
            )
        except (InconclusiveMatchError, RequiresServerEvaluation):
            outcome["sdk_inconclusive"] += 1
            return None
        if expected is not False and self.skipped:
            outcome["skipped_then_matched"] += 1
            return None
        outcome["compared"] += 1
        outcome["enabled" if expected is not False else "disabled"] += 1
        actual = answer.get("variant", answer["enabled"])
        expected_payload = None
        if expected is not False:
            lookup = "true" if expected is True else expected
            expected_payload = (flag["filters"].get("payloads") or {}).get(lookup)
        actual_payload = answer["metadata"].get("payload")
        if actual == expected and actual_payload == expected_payload:
            return None
        return (
            f"{where}: server {actual!r} ({answer['reason']['code']}, payload "
            f"{actual_payload!r}), posthog-python {expected!r} (payload {expected_payload!r})"
        )


def test_server_matches_posthog_python_over_http(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.perf_counter()
    oracle = Oracle(monkeypatch)
    cases = list(make_cases(CASES, random.Random(SEED)))
    outcome: Counter[str] = Counter()
    mismatches: list[str] = []
    timings: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=THREADS, max_keepalive_connections=THREADS)
    with (
        httpx.Client(base_url=server.url, timeout=60.0, limits=limits) as client,
        ThreadPoolExecutor(THREADS) as pool,
    ):
        for start in range(0, len(cases), CASES_PER_PROJECT):
            batch = cases[start : start + CASES_PER_PROJECT]
            token, key = new_project(server, client, f"oracle-{SEED}-{start}")
            tick = time.perf_counter()
            create_cases(pool, server.url, key, batch)
            wait_until_served(client, token, key, sum(len(c.flags) for c in batch))
            timings["create"] += time.perf_counter() - tick
            tick = time.perf_counter()
            list(pool.map(lambda case, token=token: evaluate_over_http(client, token, case), batch))
            timings["http"] += time.perf_counter() - tick
            tick = time.perf_counter()
            for case in batch:
                oracle.compare(case, outcome, mismatches)
            timings["sdk"] += time.perf_counter() - tick

    flags_total = sum(len(case.flags) for case in cases)
    seconds = {name: round(value, 1) for name, value in timings.items()}
    print(
        f"\n{CASES} cases x {USERS_PER_CASE} users, {flags_total} flags in "
        f"{-(-len(cases) // CASES_PER_PROJECT)} projects; {dict(outcome)}; seconds: {seconds}, "
        f"total {time.perf_counter() - started:.1f}"
    )
    assert not mismatches, "\n".join(mismatches[:20]) + f"\n... {len(mismatches)} in all"
    assert outcome["compared"] > 4000, outcome
    assert outcome["enabled"] > 1000, outcome
    assert outcome["disabled"] > 1000, outcome
