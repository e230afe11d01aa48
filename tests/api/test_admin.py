"""The management API over real HTTP against the real server."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from tests.server import PROJECT_TOKEN, Api, Server

FLAGS = "/api/projects/@current/feature_flags/"


def _key() -> str:
    return f"flag-{uuid.uuid4().hex[:10]}"


def _assert_error(r: httpx.Response, status: int, attr: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) >= {"type", "code", "detail"}
    assert body["detail"]
    if attr is not None:
        assert body["attr"] == attr, body
    return body


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer phx_wrongwrongwrongwrongwrong"}, {"Authorization": "Basic x"}],
)
def test_management_api_requires_a_valid_personal_key(http: httpx.Client, headers: dict) -> None:
    _assert_error(http.get(FLAGS, headers=headers), 401)


def test_project_token_is_not_a_management_key(http: httpx.Client, token: str) -> None:
    _assert_error(http.get(FLAGS, headers={"Authorization": f"Bearer {token}"}), 401)


def test_project_id_in_path(api: Api) -> None:
    projects = api.get("/api/projects/").json()
    assert projects["count"] == 1
    pid = projects["results"][0]["id"]
    assert api.get(f"/api/projects/{pid}/feature_flags/").status_code == 200
    _assert_error(api.get(f"/api/projects/{pid + 1000}/feature_flags/"), 404)
    _assert_error(api.get("/api/projects/abc/feature_flags/"), 404)


def test_flag_lifecycle_bumps_version_and_soft_deletes(api: Api) -> None:
    key = _key()
    flag = api.create_flag(
        key=key,
        name="checkout",
        filters={"groups": [{"properties": [], "rollout_percentage": 30}]},
    )
    assert flag["key"] == key and flag["version"] == 1 and flag["active"] is True
    assert flag["deleted"] is False and isinstance(flag["id"], int)

    r = api.patch(f"{FLAGS}{flag['id']}/", json={"active": False})
    assert r.status_code == 200, r.text
    assert r.json()["active"] is False and r.json()["version"] == 2
    assert r.json()["filters"]["groups"][0]["rollout_percentage"] == 30

    got = api.get(f"{FLAGS}{flag['id']}/").json()
    assert got["version"] == 2

    assert api.delete(f"{FLAGS}{flag['id']}/").status_code == 204
    deleted = api.get(f"{FLAGS}{flag['id']}/").json()
    assert deleted["deleted"] is True and deleted["version"] == 3
    listed = [f["key"] for f in api.get(FLAGS, params={"limit": 1000}).json()["results"]]
    assert key not in listed
    # the key is free again once the old flag is deleted
    api.create_flag(key=key, filters={"groups": []})


def test_duplicate_active_key_is_rejected(api: Api) -> None:
    key = _key()
    api.create_flag(key=key)
    _assert_error(api.post(FLAGS, json={"key": key}), 400, "key")


@pytest.mark.parametrize(
    ("body", "attr"),
    [
        ({"filters": {"groups": [{"properties": [], "rollout_percentage": 120}]}}, "rollout"),
        ({"filters": {"groups": [{"properties": [], "rollout_percentage": -1}]}}, "rollout"),
        (
            {
                "filters": {
                    "groups": [
                        {
                            "properties": [
                                {"key": "email", "value": "x", "operator": "nope", "type": "person"}
                            ]
                        }
                    ]
                }
            },
            "operator",
        ),
        (
            {
                "filters": {
                    "groups": [{"properties": [], "rollout_percentage": 100}],
                    "multivariate": {
                        "variants": [
                            {"key": "a", "rollout_percentage": 50},
                            {"key": "b", "rollout_percentage": 40},
                        ]
                    },
                }
            },
            "multivariate",
        ),
        (
            {
                "filters": {
                    "groups": [{"properties": [], "rollout_percentage": 100}],
                    "payloads": {"true": "{not json"},
                }
            },
            "payloads",
        ),
        ({"key": "has spaces"}, "key"),
        ({"active": "yes"}, "active"),
        ({"filters": []}, "filters"),
    ],
)
def test_invalid_flags_get_400_naming_the_field(api: Api, body: dict, attr: str) -> None:
    r = api.post(FLAGS, json={"key": _key(), **body})
    err = _assert_error(r, 400)
    assert attr in (err["attr"] or "") or attr in err["detail"], err


def test_invalid_json_body(api: Api) -> None:
    r = api.client.post(FLAGS, content=b"{nope", headers={"Content-Type": "application/json"})
    _assert_error(r, 400)


def test_flags_list_is_paginated(api: Api) -> None:
    for _ in range(3):
        api.create_flag(key=_key())
    page = api.get(FLAGS, params={"limit": 2}).json()
    assert set(page) == {"count", "next", "previous", "results"}
    assert len(page["results"]) == 2 and page["count"] >= 3
    assert page["previous"] is None and page["next"]
    second = api.client.get(page["next"]).json()
    assert second["previous"] is not None
    ids = {f["id"] for f in page["results"]} & {f["id"] for f in second["results"]}
    assert not ids


def test_evaluation_tags_alias_and_defaults(api: Api) -> None:
    flag = api.create_flag(key=_key(), evaluation_tags=["web"], evaluation_runtime="client")
    assert flag["evaluation_contexts"] == ["web"]
    assert flag["evaluation_runtime"] == "client"
    assert flag["ensure_experience_continuity"] is False


def test_missing_flag_is_404(api: Api) -> None:
    _assert_error(api.get(f"{FLAGS}999999/"), 404)
    _assert_error(api.patch(f"{FLAGS}999999/", json={"active": False}), 404)


def test_dynamic_and_static_cohorts(api: Api) -> None:
    cohorts = "/api/projects/@current/cohorts/"
    dynamic = api.post(
        cohorts,
        json={
            "name": "paying",
            "filters": {
                "properties": {
                    "type": "OR",
                    "values": [
                        {
                            "type": "AND",
                            "values": [
                                {
                                    "key": "plan",
                                    "value": "pro",
                                    "type": "person",
                                    "operator": "exact",
                                }
                            ],
                        }
                    ],
                }
            },
        },
    )
    assert dynamic.status_code == 201, dynamic.text
    assert dynamic.json()["is_static"] is False

    static = api.post(cohorts, json={"name": "beta", "is_static": True, "distinct_ids": ["a", "b"]})
    assert static.status_code == 201, static.text
    sid = static.json()["id"]
    assert static.json()["count"] == 2
    r = api.patch(f"{cohorts}{sid}/add_persons_to_static_cohort/", json={"distinct_ids": ["c"]})
    assert r.status_code == 200 and r.json()["count"] == 3
    r = api.patch(f"{cohorts}{sid}/remove_person_from_static_cohort/", json={"distinct_ids": ["a"]})
    assert r.json()["count"] == 2
    assert api.get(f"{cohorts}{sid}/persons/").json()["results"] == ["b", "c"]

    bad = api.post(cohorts, json={"name": "bad", "filters": {"properties": {"type": "XOR"}}})
    _assert_error(bad, 400)
    not_static = api.patch(
        f"{cohorts}{dynamic.json()['id']}/add_persons_to_static_cohort/",
        json={"distinct_ids": ["x"]},
    )
    _assert_error(not_static, 400)
    assert api.delete(f"{cohorts}{sid}/").status_code == 204
    assert sid not in [c["id"] for c in api.get(cohorts).json()["results"]]


def test_read_views_answer_for_unknown_data(api: Api) -> None:
    p = "/api/projects/@current"
    assert api.get(f"{p}/persons/", params={"distinct_id": "nobody"}).json()["results"] == []
    _assert_error(api.get(f"{p}/persons/"), 400, "distinct_id")
    _assert_error(
        api.get(f"{p}/groups/find", params={"group_type_index": 0, "group_key": "zz"}), 404
    )
    _assert_error(
        api.get(f"{p}/groups/find", params={"group_type_index": 9, "group_key": "z"}), 400
    )
    events = api.get(f"{p}/events/", params={"distinct_id": "nobody"}).json()
    assert events == {"next": None, "results": []}
    _assert_error(api.get(f"{p}/events/", params={"after": "yesterday"}), 400, "after")
    warnings = api.get(f"{p}/ingestion_warnings/").json()
    assert set(warnings) == {"count", "next", "previous", "results"}


def test_create_project_returns_token_and_key(api: Api) -> None:
    r = api.post("/api/projects/", json={"name": "second"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["api_token"].startswith("phc_") and body["personal_api_key"].startswith("phx_")
    other = Api(api.client.base_url.__str__().rstrip("/"), body["personal_api_key"])
    assert other.get("/api/projects/@current/").json()["id"] == body["id"]
    assert other.get(FLAGS).json()["count"] == 0
    _assert_error(api.post("/api/projects/", json={}), 400, "name")


def test_openapi_schema_covers_every_route(api: Api, http: httpx.Client) -> None:
    from flagstaff.app import PATTERN_ROUTES, public_routes
    from flagstaff.http.admin import ROUTES
    from flagstaff.http.openapi import SELF_PATHS, documented_paths

    schema = http.get("/api/schema/").json()
    assert schema["openapi"].startswith("3.")
    documented = {(m.upper(), p) for p, ops in schema["paths"].items() for m in ops}
    declared = {(m, p) for m, p, _, _ in ROUTES}
    public = {
        (m, p)
        for p, methods in documented_paths([*public_routes().values(), *PATTERN_ROUTES])
        for m in methods
    }
    assert {"/flags", "/decide", "/i/v0/e", "/batch", "/array/{token}/config.js"} <= {
        p for _, p in public
    }
    assert documented == declared | public | {("GET", p) for p in SELF_PATHS}
    for method, path in documented:
        op = schema["paths"][path][method.lower()]
        assert op["summary"], (method, path)
        success = [c for c in op["responses"] if c.startswith("2")]
        assert success, (method, path)
        if "204" not in success:  # every answer with a body says what the body is
            content = op["responses"][success[0]]["content"]
            assert next(iter(content.values()))["schema"], (method, path)
        if method in ("POST", "PATCH", "PUT") and path not in ("/_health",):
            assert op["requestBody"]["content"]["application/json"]["schema"], (method, path)
    # every documented management operation is really served (none answers 404/405 itself)
    for method, path in sorted(declared):
        url = (
            path.replace("{project_id}", "@current")
            .replace("{flag_id}", "999999")
            .replace("{cohort_id}", "999999")
        )
        r = api.client.request(method, url, json={} if method in ("POST", "PATCH") else None)
        assert r.status_code != 405, (method, path, r.text)
        if r.status_code == 404:
            assert r.json()["code"] == "not_found" and "no such" in r.json()["detail"], (
                method,
                path,
            )


def test_group_types_are_created_listed_and_used_by_group_flags(fresh_server: Server) -> None:
    api = Api(fresh_server.url)
    types_url = "/api/projects/@current/groups_types/"
    assert api.get(types_url).json() == []

    r = api.post(types_url, json={"group_type": "company"})
    assert r.status_code == 201, r.text
    assert r.json()["group_type"] == "company" and r.json()["group_type_index"] == 0
    again = api.post(types_url, json={"group_type": "company"})
    assert again.status_code == 200 and again.json()["group_type_index"] == 0
    assert (
        api.post(types_url, json={"group_type": "team", "group_type_index": 3}).status_code == 201
    )
    _assert_error(api.post(types_url, json={"group_type": "org", "group_type_index": 0}), 400)
    _assert_error(api.post(types_url, json={"group_type": "company", "group_type_index": 1}), 400)
    _assert_error(api.post(types_url, json={"group_type": "x", "group_type_index": 5}), 400)
    _assert_error(api.post(types_url, json={"group_type_index": 1}), 400, "group_type")
    listed = api.get(types_url).json()
    assert [(t["group_type_index"], t["group_type"]) for t in listed] == [
        (0, "company"),
        (3, "team"),
    ]
    assert set(listed[0]) >= {"name_singular", "name_plural", "created_at"}

    key = _key()
    api.create_flag(
        key=key,
        filters={
            "aggregation_group_type_index": 3,
            "groups": [{"properties": [], "rollout_percentage": 100}],
        },
    )
    body = {"api_key": PROJECT_TOKEN, "distinct_id": "u1", "groups": {"team": "blue"}}
    deadline = time.monotonic() + 10
    while True:
        flag = httpx.post(f"{fresh_server.url}/flags?v=2", json=body).json()["flags"].get(key)
        if flag is not None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert flag is not None and flag["enabled"] is True, flag
    assert flag["reason"]["code"] == "condition_match"
