"""Flag definitions for SDK local evaluation, remote config and posthog-js start-up config,
over real HTTP, and posthog-python itself against the server (local and remote evaluation).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from posthog import Posthog

from tests.server import PROJECT_TOKEN, Api, Server

ROUTES = ["/flags/definitions", "/api/feature_flag/local_evaluation/"]


@dataclass
class Project:
    token: str
    key: str
    api: Api
    http: httpx.Client

    def definitions(self, route: str = ROUTES[0], **headers: str) -> httpx.Response:
        return self.api.get(f"{route}?token={self.token}&send_cohorts", headers=headers)

    def wait_for(self, *keys: str, timeout: float = 2.0) -> dict[str, Any]:
        """The definitions once every key is served (the workers refresh periodically)."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.definitions()
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            if set(keys) <= {flag["key"] for flag in body["flags"]}:
                return body
            assert time.monotonic() < deadline, f"{keys} not served"
            time.sleep(0.05)


@pytest.fixture
def project(server: Server, api: Api, http: httpx.Client) -> Iterator[Project]:
    r = api.post("/api/projects/", json={"name": f"defs-{uuid.uuid4().hex[:8]}"})
    assert r.status_code == 201, r.text
    body = r.json()
    key = body["personal_api_key"]
    own_api = Api(server.url, key)
    try:
        yield Project(body["api_token"], key, own_api, http)
    finally:
        own_api.client.close()


def on(rollout: float = 100, properties: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"groups": [{"properties": properties or [], "rollout_percentage": rollout}]}


def _group_type(project: Project, name: str) -> None:
    event = {
        "event": "$groupidentify",
        "distinct_id": "admin",
        "properties": {"$group_type": name, "$group_key": "seed", "$group_set": {}},
    }
    r = project.http.post("/batch/", json={"api_key": project.token, "batch": [event]})
    assert r.status_code == 200, r.text


# definitions -------------------------------------------------------------------------------


def test_definitions_shape(project: Project) -> None:
    _group_type(project, "company")
    dynamic = project.api.post(
        "/api/projects/@current/cohorts/",
        json={
            "name": "pros",
            "filters": {
                "properties": {
                    "type": "OR",
                    "values": [{"key": "plan", "value": "pro", "type": "person"}],
                }
            },
        },
    ).json()
    static = project.api.post(
        "/api/projects/@current/cohorts/",
        json={"name": "listed", "is_static": True, "distinct_ids": ["a"]},
    ).json()
    base = project.api.create_flag(key="zeta-base", filters=on(30))
    project.api.create_flag(
        key="alpha-dependent",
        filters=on(
            properties=[
                {
                    "key": str(base["id"]),
                    "type": "flag",
                    "value": True,
                    "operator": "flag_evaluates_to",
                }
            ]
        ),
    )
    project.api.create_flag(
        key="mid-cohorts",
        filters=on(
            properties=[
                {"key": "id", "type": "cohort", "value": dynamic["id"]},
                {"key": "id", "type": "cohort", "value": static["id"]},
            ]
        ),
    )
    gone = project.api.create_flag(key="deleted-one", filters=on())
    assert (
        project.api.delete(f"/api/projects/@current/feature_flags/{gone['id']}/").status_code == 204
    )

    body = project.wait_for("alpha-dependent", "mid-cohorts", "zeta-base")
    assert set(body) == {"flags", "group_type_mapping", "cohorts"}
    assert [flag["key"] for flag in body["flags"]] == [
        "alpha-dependent",
        "mid-cohorts",
        "zeta-base",
    ]
    assert body["group_type_mapping"] == {"0": "company"}
    assert body["cohorts"] == {str(dynamic["id"]): dynamic["filters"]["properties"]}
    dependency = body["flags"][0]["filters"]["groups"][0]["properties"][0]
    assert dependency["key"] == "zeta-base"
    assert dependency["dependency_chain"] == ["zeta-base"]
    for flag in body["flags"]:
        assert {"id", "key", "active", "filters", "ensure_experience_continuity"} <= set(flag)
        assert flag["deleted"] is False

    legacy = project.definitions(ROUTES[1])
    assert legacy.status_code == 200
    assert legacy.json() == body
    assert legacy.headers["etag"] == project.definitions().headers["etag"]


@pytest.mark.parametrize("route", ROUTES)
def test_weak_etag_and_not_modified(project: Project, route: str) -> None:
    project.api.create_flag(key="first", filters=on())
    project.wait_for("first")
    first = project.definitions(route)
    etag = first.headers["etag"]
    assert re.fullmatch(r'W/"[^"]+"', etag), etag

    again = project.definitions(route, **{"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag
    listed = project.definitions(route, **{"If-None-Match": f'W/"stale", {etag}'})
    assert listed.status_code == 304
    assert project.definitions(route, **{"If-None-Match": 'W/"stale"'}).status_code == 200

    project.api.create_flag(key="second", filters=on())
    project.wait_for("second")
    changed = project.definitions(route, **{"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["etag"] != etag
    assert {flag["key"] for flag in changed.json()["flags"]} == {"first", "second"}


@pytest.mark.parametrize("route", ROUTES)
def test_definitions_need_the_projects_key(project: Project, api: Api, route: str) -> None:
    url = f"{route}?token={project.token}&send_cohorts"
    assert project.http.get(url).status_code == 401
    bad = project.http.get(url, headers={"Authorization": "Bearer phx_notakey0000000000000000"})
    assert bad.status_code == 401
    assert bad.json()["detail"]
    other = api.get(url)  # the default project's key, this project's token
    assert other.status_code == 401
    assert project.api.get(route).status_code == 200  # the key alone names its project


# remote config and posthog-js config -------------------------------------------------------


def test_remote_config_payload(project: Project) -> None:
    project.api.create_flag(
        key="site-config", filters={**on(), "payloads": {"true": '{"color": "blue"}'}}
    )
    project.api.create_flag(key="no-payload", filters=on())
    r = project.api.get(
        f"/api/projects/@current/feature_flags/site-config/remote_config?token={project.token}"
    )
    assert r.status_code == 200, r.text
    assert r.json() == '{"color": "blue"}'  # the stored JSON text, as PostHog answers
    missing = "/api/projects/@current/feature_flags/{}/remote_config?token=" + project.token
    assert project.api.get(missing.format("nope")).status_code == 404
    no_payload = project.api.get(missing.format("no-payload"))
    assert no_payload.status_code == 200 and no_payload.json() is None
    assert project.http.get(missing.format("site-config")).status_code == 401

    client = Posthog(
        project.token, host=str(project.http.base_url), secret_key=project.key, send=False
    )
    try:
        payload = client.get_remote_config_payload("site-config")
    finally:
        client.shutdown()
    assert json.loads(payload) == {"color": "blue"}


def _check_js_config(config: dict[str, Any], token: str, has_flags: bool) -> None:
    assert config["token"] == token
    assert {"gzip", "gzip-js"} <= set(config["supportedCompression"])
    assert config["hasFeatureFlags"] is has_flags
    for name in ("sessionRecording", "autocapture_opt_out", "heatmaps", "surveys"):
        assert name in config
    assert config["siteApps"] == []


def test_posthog_js_start_up_config(project: Project) -> None:
    r = project.http.get(f"/array/{project.token}/config")
    assert r.status_code == 200, r.text
    _check_js_config(r.json(), project.token, has_flags=False)

    project.api.create_flag(key="anything", filters=on())
    project.wait_for("anything")
    r = project.http.get(f"/array/{project.token}/config.js")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/javascript")
    script = r.text
    assert f'window._POSTHOG_REMOTE_CONFIG["{project.token}"]=' in script
    found = re.search(r"=\{config:(\{.*\}),siteApps:\[\]\}", script)
    assert found is not None, script
    _check_js_config(json.loads(found.group(1)), project.token, has_flags=True)

    assert project.http.get("/array/phc_unknowntoken000000000000/config").status_code == 401


# posthog-python against the server ---------------------------------------------------------


@pytest.fixture
def sdk_project(project: Project) -> Project:
    _group_type(project, "company")
    cohort = project.api.post(
        "/api/projects/@current/cohorts/",
        json={
            "name": "adults",
            "filters": {
                "properties": {
                    "type": "AND",
                    "values": [{"key": "age", "value": 18, "operator": "gte", "type": "person"}],
                }
            },
        },
    ).json()
    gold = {"key": "tier", "value": "gold", "type": "group", "group_type_index": 0}
    project.api.create_flag(key="half", filters=on(50))
    project.api.create_flag(
        key="split",
        filters={
            **on(80),
            "multivariate": {
                "variants": [
                    {"key": "red", "rollout_percentage": 34},
                    {"key": "green", "rollout_percentage": 33},
                    {"key": "blue", "rollout_percentage": 33},
                ]
            },
            "payloads": {"red": '{"hex": "#f00"}'},
        },
    )
    project.api.create_flag(
        key="pro-plan",
        filters={**on(properties=[{"key": "plan", "value": ["pro", "team"], "type": "person"}])},
    )
    project.api.create_flag(
        key="gold-company",
        filters={
            "aggregation_group_type_index": 0,
            "groups": [{"properties": [gold], "rollout_percentage": 70}],
        },
    )
    project.api.create_flag(
        key="adults-only",
        filters=on(properties=[{"key": "id", "type": "cohort", "value": cohort["id"]}]),
    )
    project.wait_for("half", "split", "pro-plan", "gold-company", "adults-only")
    return project


@pytest.fixture
def quiet_posthog() -> Iterator[None]:
    logger = logging.getLogger("posthog")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _definition_requests(http: httpx.Client, status: int) -> int:
    text = http.get("/metrics").text
    found = re.search(
        rf'flagstaff_http_requests_total\{{route="/flags/definitions",status="{status}"\}} (\d+)',
        text,
    )
    return int(found.group(1)) if found else 0


def test_posthog_python_local_and_remote_evaluation_agree(
    sdk_project: Project, quiet_posthog: None
) -> None:
    host = str(sdk_project.http.base_url)
    local = Posthog(
        sdk_project.token,
        host=host,
        secret_key=sdk_project.key,
        send=False,
        poll_interval=600,
    )
    remote = Posthog(sdk_project.token, host=host, send=False)
    try:
        not_modified_before = _definition_requests(sdk_project.http, 304)
        local.load_feature_flags()
        assert {flag["key"] for flag in local.feature_flags} == {
            "half",
            "split",
            "pro-plan",
            "gold-company",
            "adults-only",
        }
        etag = local._flags_etag
        assert etag == sdk_project.definitions().headers["etag"]
        local.load_feature_flags()  # the next poll: If-None-Match, answered 304
        assert _definition_requests(sdk_project.http, 304) == not_modified_before + 1
        assert len(local.feature_flags) == 5

        seen: set[Any] = set()
        for i in range(24):
            distinct_id = f"sdk-user-{i}"
            kwargs: dict[str, Any] = {
                "person_properties": {"plan": ["pro", "free", "Team"][i % 3], "age": 10 + i},
                "groups": {"company": f"company-{i % 5}"},
                "group_properties": {"company": {"tier": ["gold", "tin"][i % 2]}},
            }
            expected = local.get_all_flags_and_payloads(
                distinct_id, only_evaluate_locally=True, **kwargs
            )
            actual = remote.get_all_flags_and_payloads(distinct_id, **kwargs)
            assert (
                set(expected["featureFlags"])
                == set(actual["featureFlags"])
                == {
                    "half",
                    "split",
                    "pro-plan",
                    "gold-company",
                    "adults-only",
                }
            )
            assert actual == expected, distinct_id
            local_snapshot = local.evaluate_flags(distinct_id, only_evaluate_locally=True, **kwargs)
            remote_snapshot = remote.evaluate_flags(distinct_id, **kwargs)
            assert sorted(remote_snapshot.keys) == sorted(local_snapshot.keys)
            for key in local_snapshot.keys:
                assert remote_snapshot.get_flag(key) == local_snapshot.get_flag(key), key
                assert remote_snapshot.get_flag_payload(key) == local_snapshot.get_flag_payload(key)
            seen.update((k, str(v)) for k, v in actual["featureFlags"].items())
        # The ids cover both outcomes of every flag and every variant.
        for key in ("half", "pro-plan", "gold-company", "adults-only"):
            assert {(key, "True"), (key, "False")} <= seen, key
        assert {("split", "red"), ("split", "green"), ("split", "blue"), ("split", "False")} <= seen
    finally:
        local.shutdown()
        remote.shutdown()


def test_default_project_token_is_served(http: httpx.Client) -> None:
    r = http.get(f"/array/{PROJECT_TOKEN}/config")
    assert r.status_code == 200
    assert r.json()["token"] == PROJECT_TOKEN


def test_server_only_definitions_are_served_and_posthog_python_agrees(
    project: Project, quiet_posthog: None
) -> None:
    """Flags the SDK cannot always decide (look-around, non-numeric comparisons, early exit)
    are served for local evaluation; posthog-python evaluates them or falls back to /flags,
    and gives the server's answer either way. A semver filter is served too, but
    posthog-python reads some values differently from the server (``1.2.3.4`` is 1.2.3 to
    it, no version to the server: docs/compat-notes.md), so only its serving is checked."""

    def prop(key: str, value: Any, operator: str) -> dict[str, Any]:
        return {"key": key, "value": value, "operator": operator, "type": "person"}

    made = {
        "look-ahead": on(properties=[prop("path", "foo(?!bar)", "regex")]),
        "plan-gt": on(properties=[prop("plan", "pro", "gt")]),
        "four-parts": on(properties=[prop("v", "1.2.3.4", "semver_eq")]),
        "stops": {
            "groups": [
                {"properties": [prop("plan", "pro", "exact")], "rollout_percentage": 30},
                {"properties": [], "rollout_percentage": 100},
            ],
            "early_exit": True,
        },
    }
    for key, filters in made.items():
        project.api.create_flag(key=key, filters=filters)
    served = {flag["key"]: flag for flag in project.wait_for(*made)["flags"]}
    for key, filters in made.items():
        assert served[key]["filters"]["groups"] == filters["groups"], key
    assert served["stops"]["filters"]["early_exit"] is True

    host = str(project.http.base_url)
    sdk = Posthog(project.token, host=host, secret_key=project.key, send=False, poll_interval=600)
    try:
        sdk.load_feature_flags()
        for i in range(12):
            distinct_id = f"sdk-{i}"
            properties = {
                "path": ["/foobar", "/foobaz"][i % 2],
                "plan": ["pro", "free"][i % 2],
                "v": ["1.2.3.4", "1.2.3"][i % 2],
            }
            r = project.http.post(
                "/flags?v=2",
                json={
                    "api_key": project.token,
                    "distinct_id": distinct_id,
                    "person_properties": properties,
                },
            )
            server = {k: f.get("variant", f["enabled"]) for k, f in r.json()["flags"].items()}
            local = sdk.evaluate_flags(distinct_id, person_properties=properties)
            for key in ("look-ahead", "plan-gt", "stops"):
                value = local.get_flag(key)
                assert value == server[key], (key, distinct_id, value, server[key])
    finally:
        sdk.shutdown()
