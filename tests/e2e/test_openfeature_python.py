"""The OpenFeature Python SDK with the generic OFREP provider (PyPI ``openfeature-sdk`` and
``openfeature-provider-ofrep``) against Flagstaff: on seeded random flags, cohorts, persons
and groups (tests/flaggen.py), every evaluation agrees with /flags for the same person.

Half of the persons are stored (``$identify`` with ``$set``) and sent by their targeting key
alone; the other half send their properties as context attributes. Group properties are
stored (``$groupidentify``), since an OpenFeature context names groups but not their
properties. Each flag is evaluated through the SDK with the type of /flags' answer (boolean,
or string for a variant), so a wrong type shows as an error.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from openfeature import api as openfeature
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext
from openfeature.exception import ErrorCode
from openfeature.flag_evaluation import FlagEvaluationDetails

from tests.api.test_flags_oracle_http import (
    Case,
    User,
    create_cases,
    make_cases,
    new_project,
    wait_until_served,
)
from tests.server import Server

CASES = 80
SEED = 20261128
STORED, SENT = "stored", "sent"
"""Marks on ``User.device_id``, which an OpenFeature context cannot carry anyway."""


@pytest.fixture
def openfeature_client(flagstaff: Server) -> Iterator[tuple[Any, str, str]]:
    """An OpenFeature client on the OFREP provider, in a project with the generator's group
    types; also the project's token and personal key."""
    with httpx.Client(base_url=flagstaff.url, timeout=30.0) as http:
        token, key = new_project(flagstaff, http, "openfeature-python")
    provider = OFREPProvider(
        flagstaff.url, headers_factory=lambda: {"Authorization": f"Bearer {token}"}
    )
    openfeature.set_provider(provider)
    try:
        yield openfeature.get_client(), token, key
    finally:
        openfeature.clear_providers()


def _stores_person(user: User) -> bool:
    """Half of the users (the first of each case's three, and so on) have a stored person."""
    return user.device_id == STORED


def _store(http: httpx.Client, token: str, cases: list[Case]) -> None:
    """Every user's group properties, and the properties of the users whose person is stored."""
    batch: list[dict[str, Any]] = []
    for case in cases:
        for user in case.users:
            for group_type, group_key in user.groups.items():
                batch.append(
                    {
                        "event": "$groupidentify",
                        "distinct_id": user.distinct_id,
                        "properties": {
                            "$group_type": group_type,
                            "$group_key": group_key,
                            "$group_set": user.group_properties.get(group_type, {}),
                        },
                    }
                )
            if _stores_person(user):
                batch.append(
                    {
                        "event": "$identify",
                        "distinct_id": user.distinct_id,
                        "properties": {"$set": user.person},
                    }
                )
    for start in range(0, len(batch), 500):
        r = http.post("/batch/", json={"api_key": token, "batch": batch[start : start + 500]})
        assert r.status_code == 200, r.text


def _context(user: User) -> EvaluationContext:
    attributes: dict[str, Any] = {} if _stores_person(user) else dict(user.person)
    if user.groups:
        attributes["groups"] = user.groups
    return EvaluationContext(targeting_key=user.distinct_id, attributes=attributes)


def _flags_answer(http: httpx.Client, token: str, user: User) -> dict[str, Any]:
    body: dict[str, Any] = {"api_key": token, "distinct_id": user.distinct_id}
    if user.groups:
        body["groups"] = user.groups
    if not _stores_person(user):
        body["person_properties"] = user.person
    r = http.post("/flags?v=2", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json()["flags"])


def _evaluate(client: Any, key: str, expected: bool | str, user: User) -> FlagEvaluationDetails:
    ctx = _context(user)
    if isinstance(expected, str):
        return client.get_string_details(key, "code-default", ctx)
    return client.get_boolean_details(key, not expected, ctx)


def _check(client: Any, case: Case, user: User, answer: dict[str, Any], seen: Counter[str]) -> None:
    for flag in case.flags:
        key = flag["key"]
        where = f"case {case.number} user {user.distinct_id} flag {key}"
        served = answer.get(key)
        if served is None:
            details = client.get_boolean_details(key, True, _context(user))
            if not flag["active"]:
                assert (details.value, details.reason, details.variant) == (
                    False,
                    "DISABLED",
                    "false",
                ), where
                seen["DISABLED"] += 1
            else:  # left out of /flags (a dependency cycle): not found here either
                assert details.error_code == ErrorCode.FLAG_NOT_FOUND, where
                seen["not found"] += 1
            continue
        expected = served.get("variant") or served["enabled"]
        details = _evaluate(client, key, expected, user)
        if served.get("failed"):
            assert details.error_code == ErrorCode.GENERAL, where
            seen["failed"] += 1
            continue
        assert details.error_code is None, f"{where}: {details.error_message}"
        assert details.value == expected, f"{where}: {details.value!r} != {expected!r}"
        assert details.variant == (expected if isinstance(expected, str) else str(expected).lower())
        assert details.reason in ("TARGETING_MATCH", "SPLIT", "DEFAULT"), where
        if served["enabled"]:
            assert details.reason != "DEFAULT", where
        else:
            assert details.reason != "TARGETING_MATCH", where
        payload = served["metadata"].get("payload")
        assert details.flag_metadata.get("payload") == payload, where
        seen[str(details.reason)] += 1


def test_openfeature_python_sdk_agrees_with_flags(
    flagstaff: Server, openfeature_client: tuple[Any, str, str]
) -> None:
    client, token, key = openfeature_client
    rng = random.Random(SEED)
    cases = list(make_cases(CASES, rng))
    for case in cases:
        for i, user in enumerate(case.users):
            user.device_id = STORED if i % 2 == 0 else SENT
    with ThreadPoolExecutor(8) as pool:
        create_cases(pool, flagstaff.url, key, cases)
    with httpx.Client(base_url=flagstaff.url, timeout=30.0) as http:
        wait_until_served(http, token, key, sum(len(c.flags) for c in cases))
        _store(http, token, cases)
        seen: Counter[str] = Counter()
        for case in cases:
            for user in case.users:
                _check(client, case, user, _flags_answer(http, token, user), seen)
    # the random cases reach every outcome
    assert {"TARGETING_MATCH", "SPLIT", "DEFAULT", "DISABLED"} <= set(seen), seen
    assert sum(seen.values()) > 300, seen
