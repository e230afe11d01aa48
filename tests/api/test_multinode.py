"""Several stateless nodes on one PostgreSQL behave as one service (real servers, real SQL)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pg import new_database
from tests.server import PROJECT_TOKEN, Api, Server

P = "/api/projects/@current"


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[Server]]:
    url = new_database()
    env = {
        "FLAGSTAFF_DATABASE_URL": url,
        # a long poll: only LISTEN/NOTIFY can make a change visible within a second
        "FLAGSTAFF_DEFINITIONS_REFRESH_SECONDS": "60",
    }
    servers = [
        Server(data_dir=tmp_path / f"node{i}", workers=2 if i == 0 else 1, env=dict(env))
        for i in range(3)
    ]
    for srv in servers:
        srv.start(timeout=60)
    try:
        yield servers
    finally:
        for srv in servers:
            srv.stop()


def _flags(srv: Server, distinct_id: str, **body: Any) -> dict[str, Any]:
    r = httpx.post(
        f"{srv.url}/flags?v=2",
        json={"api_key": PROJECT_TOKEN, "distinct_id": distinct_id, **body},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return r.json()["flags"]


def _until(check: Any, seconds: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if check():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"not true within {seconds} s")


def test_flag_and_cohort_changes_reach_every_node_within_a_second(nodes: list[Server]) -> None:
    a, b, c = nodes
    api = Api(a.url)
    flag = api.create_flag(key="everywhere", filters={"groups": [{"rollout_percentage": 100}]})
    for node in (b, c):
        took = _until(lambda node=node: "everywhere" in _flags(node, "u1"), 1.0)
        assert took < 1.0
    r = api.patch(f"{P}/feature_flags/{flag['id']}/", json={"active": False})
    assert r.status_code == 200
    for node in (b, c):
        # node a runs two workers: both must have dropped their copy too
        _until(lambda node=node: "everywhere" not in _flags(node, "u1"), 1.0)
    for _ in range(10):
        assert "everywhere" not in _flags(a, "u1")

    cohort = api.post(
        f"{P}/cohorts/",
        json={"name": "beta", "is_static": True, "distinct_ids": ["member"]},
    ).json()
    api.create_flag(
        key="beta-only",
        filters={
            "groups": [
                {
                    "properties": [
                        {"key": "id", "type": "cohort", "value": cohort["id"], "operator": "in"}
                    ],
                    "rollout_percentage": 100,
                }
            ]
        },
    )
    _until(lambda: _flags(c, "member").get("beta-only", {}).get("enabled") is True, 1.0)
    assert _flags(c, "stranger")["beta-only"]["enabled"] is False


def test_concurrent_identify_alias_and_set_through_different_nodes(nodes: list[Server]) -> None:
    """Many clients, one person: no split person and no lost property update."""
    users = [f"user-{i}" for i in range(4)]
    errors: list[str] = []

    def client(n: int) -> None:
        node = nodes[n % len(nodes)]
        with httpx.Client(base_url=node.url, timeout=30) as http:
            for i in range(15):
                user = users[i % len(users)]
                anon = f"anon-{user}-{n}"
                batch = [
                    {"event": "$pageview", "distinct_id": anon, "$set": {f"c{n}_{i}": i}},
                    {
                        "event": "$identify",
                        "distinct_id": user,
                        "properties": {"$anon_distinct_id": anon, "$set": {f"i{n}_{i}": i}},
                    },
                    {
                        "event": "$create_alias",
                        "distinct_id": user,
                        "properties": {"alias": f"alias-{user}-{n}"},
                    },
                ]
                r = http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
                if r.status_code != 200:
                    errors.append(r.text)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]

    api = Api(nodes[2].url)
    for u, user in enumerate(users):
        [person] = api.get(f"{P}/persons/", params={"distinct_id": user}).json()["results"]
        expected_ids = {user}
        expected_props: dict[str, int] = {}
        for n in range(9):
            for i in range(15):
                if i % len(users) != u:
                    continue
                expected_ids |= {f"anon-{user}-{n}", f"alias-{user}-{n}"}
                expected_props[f"c{n}_{i}"] = i
                expected_props[f"i{n}_{i}"] = i
        assert set(person["distinct_ids"]) == expected_ids
        missing = {k for k in expected_props if person["properties"].get(k) != expected_props[k]}
        assert not missing, f"{user}: lost updates {sorted(missing)[:5]}"
        for did in expected_ids:
            other = api.get(f"{P}/persons/", params={"distinct_id": did}).json()["results"]
            assert other and other[0]["uuid"] == person["uuid"]


def test_a_retry_through_another_node_is_stored_once(nodes: list[Server]) -> None:
    event = {"event": "paid", "distinct_id": "retry-user", "uuid": str(uuid.uuid4())}
    for node in nodes:
        r = httpx.post(f"{node.url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": [event]})
        assert r.status_code == 200
    stored = Api(nodes[0].url).get(f"{P}/events/", params={"distinct_id": "retry-user"}).json()
    assert [e["uuid"] for e in stored["results"]] == [event["uuid"]]


def test_acknowledged_events_survive_every_node_crashing(nodes: list[Server]) -> None:
    acked: list[str] = []
    for i in range(30):
        node = nodes[i % len(nodes)]
        batch = [{"event": "durable", "distinct_id": f"d{i}", "uuid": str(uuid.uuid4())}]
        r = httpx.post(f"{node.url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
        assert r.status_code == 200
        acked.append(batch[0]["uuid"])
    for node in nodes:
        node.kill()
    nodes[1].start(timeout=60)
    stored = (
        Api(nodes[1].url).get(f"{P}/events/", params={"event": "durable", "limit": 1000}).json()
    )
    assert {e["uuid"] for e in stored["results"]} == set(acked)
