"""Read-your-writes for /flags when workers keep the stored persons and groups they read.

Every /flags request is answered from the person and group properties of every write that
was acknowledged before it was sent, on whichever worker it lands: warm both workers'
caches, change the person (or group) through ingestion, and check every following request.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.server import PROJECT_TOKEN, Api, Server

REQUESTS = 24
"""Requests after each change, each on a new connection so that both workers answer some."""


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(data_dir=tmp_path_factory.mktemp("cache") / "data", workers=2).start()
    try:
        yield srv
    finally:
        srv.stop()


def _flag_values(url: str, distinct_id: str, **body: object) -> list[bool]:
    values = []
    for _ in range(REQUESTS):
        r = httpx.post(
            f"{url}/flags/?v=2",
            json={"api_key": PROJECT_TOKEN, "distinct_id": distinct_id, **body},
        )
        assert r.status_code == 200, r.text
        values.append(r.json()["flags"]["cache-pro"]["enabled"])
    return values


def _capture(url: str, event: dict[str, object]) -> None:
    r = httpx.post(f"{url}/i/v0/e/", json={"api_key": PROJECT_TOKEN, **event})
    assert r.status_code == 200, r.text


def _wait_for_flag(url: str, key: str) -> None:
    for _ in range(100):
        r = Api(url).get(f"/flags/definitions?token={PROJECT_TOKEN}")
        if key in {f["key"] for f in r.json()["flags"]}:
            return
        time.sleep(0.05)
    raise AssertionError(f"{key} never became visible")


def test_person_change_is_seen_by_every_worker_at_once(two_workers: Server) -> None:
    url = two_workers.url
    Api(url).create_flag(
        key="cache-pro",
        filters={
            "groups": [
                {
                    "properties": [
                        {"key": "plan", "value": "pro", "type": "person", "operator": "exact"}
                    ],
                    "rollout_percentage": 100,
                }
            ]
        },
    )
    _wait_for_flag(url, "cache-pro")
    user = f"cache-{uuid.uuid4().hex[:8]}"
    _capture(url, {"event": "$set", "distinct_id": user, "properties": {"$set": {"plan": "free"}}})
    assert _flag_values(url, user) == [False] * REQUESTS
    _capture(url, {"event": "$set", "distinct_id": user, "properties": {"$set": {"plan": "pro"}}})
    assert _flag_values(url, user) == [True] * REQUESTS
    anon = f"anon-{uuid.uuid4().hex[:8]}"
    assert _flag_values(url, anon) == [False] * REQUESTS
    _capture(
        url,
        {
            "event": "$identify",
            "distinct_id": user,
            "properties": {"$anon_distinct_id": anon},
        },
    )
    assert _flag_values(url, anon) == [True] * REQUESTS


def test_group_change_is_seen_by_every_worker_at_once(two_workers: Server) -> None:
    """The first group type ingested ("company") takes index 0, which the flag names."""
    url = two_workers.url
    flag = Api(url).create_flag(
        key=f"cache-company-{uuid.uuid4().hex[:6]}",
        filters={
            "aggregation_group_type_index": 0,
            "groups": [
                {
                    "properties": [
                        {"key": "tier", "value": "gold", "type": "group", "group_type_index": 0}
                    ],
                    "rollout_percentage": 100,
                }
            ],
        },
    )
    _wait_for_flag(url, flag["key"])
    company = f"co-{uuid.uuid4().hex[:8]}"

    def values() -> list[bool]:
        out = []
        for _ in range(REQUESTS):
            r = httpx.post(
                f"{url}/flags/?v=2",
                json={"api_key": PROJECT_TOKEN, "distinct_id": "u", "groups": {"company": company}},
            )
            assert r.status_code == 200, r.text
            out.append(r.json()["flags"][flag["key"]]["enabled"])
        return out

    def identify_group(tier: str) -> None:
        _capture(
            url,
            {
                "event": "$groupidentify",
                "distinct_id": "u",
                "properties": {
                    "$group_type": "company",
                    "$group_key": company,
                    "$group_set": {"tier": tier},
                },
            },
        )

    identify_group("silver")
    assert values() == [False] * REQUESTS
    identify_group("gold")
    assert values() == [True] * REQUESTS
