"""A management write is served from the very next request: on every worker of a node, and on
other PostgreSQL nodes within a stated bound.

The servers here run with a periodic definitions check of an hour, so only the change counter
(and, between nodes, LISTEN/NOTIFY) can make a change visible. Requests go over new
connections, so the kernel spreads them over the workers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pg import new_database
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Api, Server

P = "/api/projects/@current"
NO_POLL = {"FLAGSTAFF_DEFINITIONS_REFRESH_SECONDS": "3600"}
PER_STATE = 6
"""Requests per endpoint after each write: enough that both workers answer some."""
NODE_BOUND_SECONDS = 1.0
"""How soon another PostgreSQL node serves a change (docs/scaling.md states it)."""

AUTH = {"Authorization": f"Bearer {PERSONAL_KEY}"}


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[Server]:
    srv = Server(data_dir=tmp_path / "data", workers=2, env=dict(NO_POLL)).start(timeout=60)
    try:
        yield srv
    finally:
        srv.stop()


def _filters(i: int) -> dict[str, Any]:
    return {
        "groups": [{"properties": [], "rollout_percentage": 100}],
        "payloads": {"true": json.dumps({"state": i})},
    }


class Seen:
    """What one node answers about flag ``key`` across every endpoint that serves it."""

    def __init__(self, srv: Server, key: str) -> None:
        self.url = srv.url
        self.key = key

    def flags(self) -> bool:
        r = httpx.post(
            f"{self.url}/flags?v=2", json={"api_key": PROJECT_TOKEN, "distinct_id": "u1"}
        )
        assert r.status_code == 200, r.text
        return bool(r.json()["flags"].get(self.key, {}).get("enabled"))

    def decide(self) -> bool:
        r = httpx.post(
            f"{self.url}/decide?v=3", json={"api_key": PROJECT_TOKEN, "distinct_id": "u1"}
        )
        assert r.status_code == 200, r.text
        return r.json()["featureFlags"].get(self.key) is True

    def definitions(self, route: str) -> tuple[str, bool | None, str | None]:
        """(ETag, the flag's ``active``, its payload) from a local-evaluation route."""
        r = httpx.get(f"{self.url}{route}?token={PROJECT_TOKEN}", headers=AUTH)
        assert r.status_code == 200, r.text
        flag = next((f for f in r.json()["flags"] if f["key"] == self.key), None)
        if flag is None:
            return r.headers["etag"], None, None
        return r.headers["etag"], flag["active"], flag["filters"]["payloads"].get("true")

    def remote_config(self) -> Any:
        r = httpx.get(f"{self.url}{P}/feature_flags/{self.key}/remote_config", headers=AUTH)
        assert r.status_code in (200, 404), r.text
        return r.json() if r.status_code == 200 else None

    def has_flags(self) -> tuple[bool, bool, bool]:
        """hasFeatureFlags from /array/<token>/config, config.js and /flags?config=true."""
        config = httpx.get(f"{self.url}/array/{PROJECT_TOKEN}/config").json()
        script = httpx.get(f"{self.url}/array/{PROJECT_TOKEN}/config.js").text
        in_script = '"hasFeatureFlags":true' in script
        assert in_script or '"hasFeatureFlags":false' in script, script
        flags = httpx.post(
            f"{self.url}/flags?v=2&config=true",
            json={"api_key": PROJECT_TOKEN, "distinct_id": "u1"},
        ).json()
        return config["hasFeatureFlags"], in_script, flags["hasFeatureFlags"]


def _assert_state(seen: Seen, i: int, active: bool, etags: dict[str, set[str]]) -> None:
    """Every answer of ``seen``'s node shows write ``i`` (the flag ``active``, payload i)."""
    payload = json.dumps({"state": i})
    for n in range(PER_STATE):
        assert seen.flags() is active, f"/flags after write {i}, request {n}"
        assert seen.decide() is active, f"/decide after write {i}, request {n}"
        assert seen.remote_config() == payload, f"remote config after write {i}"
        for route in ("/flags/definitions", "/api/feature_flag/local_evaluation/"):
            etag, served_active, served_payload = seen.definitions(route)
            assert (served_active, served_payload) == (active, payload), f"{route} after {i}"
            etags.setdefault(etag, set()).add(f"{i}")
    stale = {tag: states for tag, states in etags.items() if len(states) > 1}
    assert not stale, f"one ETag for several versions: {stale}"


def test_every_answer_after_a_toggle_shows_it_on_every_worker(two_workers: Server) -> None:
    api = Api(two_workers.url)
    key = "kill-switch"
    flag = api.create_flag(key=key, filters=_filters(0))
    seen = Seen(two_workers, key)
    etags: dict[str, set[str]] = {}
    _assert_state(seen, 0, True, etags)
    for i in range(1, 13):
        active = i % 2 == 0
        r = api.patch(
            f"{P}/feature_flags/{flag['id']}/", json={"active": active, "filters": _filters(i)}
        )
        assert r.status_code == 200, r.text
        _assert_state(seen, i, active, etags)


def test_create_and_delete_show_in_start_up_config_at_once(two_workers: Server) -> None:
    api = Api(two_workers.url)
    seen = Seen(two_workers, "comes-and-goes")
    for _ in range(PER_STATE):
        assert seen.has_flags() == (False, False, False)
    for round_ in range(4):
        flag = api.create_flag(key="comes-and-goes", filters=_filters(round_))
        for _ in range(PER_STATE):
            assert seen.has_flags() == (True, True, True)
            assert seen.flags() is True
        assert api.delete(f"{P}/feature_flags/{flag['id']}/").status_code == 204
        for _ in range(PER_STATE):
            assert seen.has_flags() == (False, False, False)
            assert seen.flags() is False
            assert seen.remote_config() is None
            assert seen.definitions("/flags/definitions")[1] is None


def test_cohort_changes_apply_on_the_next_request(two_workers: Server) -> None:
    api = Api(two_workers.url)
    cohort = api.post(f"{P}/cohorts/", json={"name": "plan", "filters": _plan_filter("pro")}).json()
    api.create_flag(
        key="pro-only",
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

    def enabled() -> bool:
        r = httpx.post(
            f"{two_workers.url}/flags?v=2",
            json={
                "api_key": PROJECT_TOKEN,
                "distinct_id": "u1",
                "person_properties": {"plan": "pro"},
            },
        )
        return bool(r.json()["flags"]["pro-only"]["enabled"])

    for i in range(6):
        plan = "pro" if i % 2 == 0 else "free"
        r = api.patch(f"{P}/cohorts/{cohort['id']}/", json={"filters": _plan_filter(plan)})
        assert r.status_code == 200, r.text
        for _ in range(PER_STATE):
            assert enabled() is (plan == "pro")


def _plan_filter(plan: str) -> dict[str, Any]:
    return {
        "properties": {
            "type": "AND",
            "values": [{"key": "plan", "type": "person", "value": plan, "operator": "exact"}],
        }
    }


def test_a_new_project_and_its_key_work_on_the_next_request(two_workers: Server) -> None:
    """A project created through the API serves at once on every worker. (There is no route
    that revokes or deletes a personal API key; keys are looked up in the store on every
    request, so no key cache can go stale.)"""
    created = Api(two_workers.url).post("/api/projects/", json={"name": "second"})
    assert created.status_code == 201, created.text
    token, key = created.json()["api_token"], created.json()["personal_api_key"]
    other = Api(two_workers.url, key)
    other.create_flag(key="second-flag", filters=_filters(0))
    for _ in range(PER_STATE):
        r = httpx.post(f"{two_workers.url}/flags?v=2", json={"api_key": token, "distinct_id": "x"})
        assert r.status_code == 200 and r.json()["flags"]["second-flag"]["enabled"] is True


def test_a_cli_write_to_the_data_dir_is_served_on_the_next_request(two_workers: Server) -> None:
    seen = Seen(two_workers, "from-cli")
    for _ in range(PER_STATE):  # both workers have the project's definitions cached
        assert seen.flags() is False
    export = {"results": [{"key": "from-cli", "active": True, "filters": _filters(0)}]}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "flagstaff",
            "flags",
            "import",
            "-",
            "--data-dir",
            str(two_workers.data_dir),
        ],
        input=json.dumps(export),
        capture_output=True,
        text=True,
        timeout=60,
        env={**_server_env(two_workers)},
    )
    assert done.returncode == 0, done.stderr
    for _ in range(PER_STATE):
        assert seen.flags() is True


def test_only_writes_that_were_not_refused_bump_the_change_counter(two_workers: Server) -> None:
    counter = two_workers.data_dir / "changes.counter"

    def value() -> int:
        return int.from_bytes(counter.read_bytes()[:8], "little")

    api = Api(two_workers.url)
    before = value()
    assert httpx.post(f"{two_workers.url}{P}/feature_flags/", json={}).status_code == 401
    assert api.post(f"{P}/feature_flags/", json={"key": ""}).status_code == 400
    assert api.get(f"{P}/feature_flags/").status_code == 200
    assert value() == before
    api.create_flag(key="counted", filters=_filters(0))
    assert value() > before


def _server_env(srv: Server) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGSTAFF_")}
    if srv.database_url is not None:
        env["FLAGSTAFF_DATABASE_URL"] = srv.database_url
    return env


# several PostgreSQL nodes ------------------------------------------------------------------


@pytest.fixture
def pg_nodes(tmp_path: Path) -> Iterator[list[Server]]:
    env = {"FLAGSTAFF_DATABASE_URL": new_database(), **NO_POLL}
    servers = [Server(data_dir=tmp_path / f"node{i}", workers=2, env=dict(env)) for i in range(2)]
    try:
        for srv in servers:
            srv.start(timeout=60)
        yield servers
    finally:
        for srv in servers:
            srv.stop()


def test_toggles_reach_the_other_postgres_node_within_the_bound(pg_nodes: list[Server]) -> None:
    a, b = pg_nodes
    api = Api(a.url)
    key = "kill-switch"
    flag = api.create_flag(key=key, filters=_filters(0))
    here, there = Seen(a, key), Seen(b, key)
    etags: dict[str, set[str]] = {}
    for i in range(1, 11):
        active = i % 2 == 0
        r = api.patch(
            f"{P}/feature_flags/{flag['id']}/", json={"active": active, "filters": _filters(i)}
        )
        assert r.status_code == 200, r.text
        written = time.monotonic()
        _assert_state(here, i, active, {})  # the writing node: from the next request on
        while there.flags() is not active or there.decide() is not active:
            assert time.monotonic() - written < NODE_BOUND_SECONDS, f"write {i} not on node b"
            time.sleep(0.01)
        while there.definitions("/flags/definitions")[1] is not active:
            assert time.monotonic() - written < NODE_BOUND_SECONDS, f"write {i} not on node b"
            time.sleep(0.01)
        _assert_state(there, i, active, etags)  # once seen, on both workers, never undone
