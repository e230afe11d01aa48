"""The team routes against the real server (SQLite or PostgreSQL by FLAGSTAFF_TEST_BACKEND):
members and roles (the last admin kept), static cohorts from a CSV answered by /flags, groups
searched by key, renaming the project and its event retention; viewers refused, bad input
answered 400 naming the field, every answer in its documented shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest

from flagstaff.http import schemas
from flagstaff.http import team_schemas as t
from flagstaff.store.records import Cohort
from flagstaff.store.rows import WARNINGS_KEPT
from tests.api.test_accounts_api import key_client, log_in
from tests.server import PROJECT_TOKEN, Server

ADMIN_EMAIL = "admin@example.com"
PASSWORD = "correct horse battery staple"
P = "/api/projects/@current"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        tmp_path_factory.mktemp("team") / "data",
        env={"FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN_EMAIL, "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD},
    ).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def api(server: Server) -> Iterator[httpx.Client]:
    with key_client(server) as client:  # the bootstrap key acts as the project's admin
        yield client


def _error(answer: httpx.Response, status: int, attr: str | None) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    msgspec.convert(body, schemas.Error)
    assert body["attr"] == attr, body
    return dict(body)


def _member(api: httpx.Client, email: str, role: str) -> dict[str, Any]:
    made = api.post(f"{P}/members/", json={"email": email, "role": role, "password": PASSWORD})
    assert made.status_code == 201, made.text
    return dict(made.json())


def _csv_upload(name: str, content: bytes, **fields: str) -> dict[str, Any]:
    return {
        "data": {"name": name, "is_static": "true", **fields},
        "files": {"csv": ("ids.csv", content, "text/csv")},
    }


def test_members_add_change_remove_and_the_last_admin(api: httpx.Client) -> None:
    listed = api.get(f"{P}/members/")
    assert listed.status_code == 200
    msgspec.convert(listed.json(), t.MemberPage)
    admin = next(m for m in listed.json()["results"] if m["user"]["email"] == ADMIN_EMAIL)
    assert admin["role"] == "admin"

    made = _member(api, " New.Editor@Example.com ", "editor")
    msgspec.convert(made, t.CreatedMember)
    assert made["user"]["email"] == "new.editor@example.com" and made["created_user"] is True
    assert made["role"] == "editor"
    _error(api.post(f"{P}/members/", json={"email": "new.editor@example.com", "role": "viewer"}),
           400, "email")  # fmt: skip
    _error(api.post(f"{P}/members/", json={"email": "nobody@example.com", "role": "viewer"}),
           400, "password")  # fmt: skip
    _error(api.post(f"{P}/members/", json={"email": "x@example.com", "role": "boss",
           "password": PASSWORD}), 400, "role")  # fmt: skip
    _error(api.post(f"{P}/members/", json={"email": "not an email", "role": "viewer"}),
           400, "email")  # fmt: skip
    _error(api.post(f"{P}/members/", json={"email": "y@example.com", "role": "viewer",
           "password": "short"}), 400, "password")  # fmt: skip
    _error(api.post(f"{P}/members/", json=["x"]), 400, None)

    member = f"{P}/members/{made['id']}/"
    changed = api.patch(member, json={"role": "viewer"})
    assert changed.status_code == 200 and changed.json()["role"] == "viewer"
    msgspec.convert(changed.json(), t.Member)
    _error(api.patch(member, json={"role": None}), 400, "role")
    # the only admin can neither step down nor be removed
    only_admin = f"{P}/members/{admin['id']}/"
    _error(api.patch(only_admin, json={"role": "editor"}), 400, "role")
    _error(api.delete(only_admin), 400, "role")
    assert api.delete(member).status_code == 204
    assert api.delete(member).status_code == 404
    assert api.patch(f"{P}/members/999999/", json={"role": "viewer"}).status_code == 404
    emails = [m["user"]["email"] for m in api.get(f"{P}/members/").json()["results"]]
    assert "new.editor@example.com" not in emails

    # an existing user is added without a password (and theirs is kept)
    again = api.post(f"{P}/members/", json={"email": "new.editor@example.com", "role": "editor"})
    assert again.status_code == 201 and again.json()["created_user"] is False
    activity = api.get(f"{P}/activity_log/", params={"scope": "Membership"}).json()["results"]
    assert [a["activity"] for a in activity][:3] == ["created", "deleted", "updated"]


def test_viewers_and_editors_cannot_manage_members_or_the_project(
    api: httpx.Client, server: Server
) -> None:
    viewer = _member(api, "team-viewer@example.com", "viewer")
    editor = _member(api, "team-editor@example.com", "editor")
    for email in ("team-viewer@example.com", "team-editor@example.com"):
        client, csrf = log_in(server, email, PASSWORD)
        headers = {"X-CSRF-Token": csrf, "Origin": server.url}
        assert client.get(f"{P}/members/").status_code == 200  # anyone sees the team
        refused = [
            client.post(f"{P}/members/", json={"email": "z@example.com", "role": "admin",
                        "password": PASSWORD}, headers=headers),
            client.patch(f"{P}/members/{viewer['id']}/", json={"role": "admin"}, headers=headers),
            client.delete(f"{P}/members/{editor['id']}/", headers=headers),
            client.patch(f"{P}/", json={"name": "Mine now"}, headers=headers),
        ]  # fmt: skip
        for answer in refused:
            assert answer.status_code == 403, answer.text
            assert answer.json()["code"] == "permission_denied"
    upload = _csv_upload("viewer cohort", b"a\nb\n")
    client, csrf = log_in(server, "team-viewer@example.com", PASSWORD)
    refused_upload = client.post(
        f"{P}/cohorts/", headers={"X-CSRF-Token": csrf, "Origin": server.url}, **upload
    )
    assert refused_upload.status_code == 403


def test_a_static_cohort_from_a_csv_answers_flags(api: httpx.Client, server: Server) -> None:
    made = api.post(f"{P}/cohorts/", **_csv_upload("Beta list", b"ann\r\nbob\r\n\r\nann\r\n"))
    assert made.status_code == 201, made.text
    cohort = made.json()
    msgspec.convert(cohort, Cohort)
    assert cohort["is_static"] is True and cohort["count"] == 2 and cohort["name"] == "Beta list"
    flag = api.post(
        f"{P}/feature_flags/",
        json={
            "key": "csv-beta",
            "filters": {
                "groups": [
                    {
                        "properties": [{"key": "id", "type": "cohort", "value": cohort["id"]}],
                        "rollout_percentage": 100,
                    }
                ]
            },
        },
    )
    assert flag.status_code == 201, flag.text

    def enabled(distinct_id: str) -> bool:
        answer = httpx.post(
            f"{server.url}/flags?v=2", json={"api_key": PROJECT_TOKEN, "distinct_id": distinct_id}
        )
        return bool(answer.json()["flags"]["csv-beta"]["enabled"])

    assert enabled("ann") and enabled("bob") and not enabled("cat")
    # PATCH with a CSV adds (a header names the column), and may rename
    added = api.patch(
        f"{P}/cohorts/{cohort['id']}/",
        data={"name": "Beta list 2"},
        files={"csv": ("more.csv", b"email,distinct_id\ncat@example.com,cat\n,\n")},
    )
    assert added.status_code == 200, added.text
    assert added.json()["count"] == 3 and added.json()["name"] == "Beta list 2"
    assert enabled("cat")
    members = api.get(f"{P}/cohorts/{cohort['id']}/persons/").json()["results"]
    assert members == ["ann", "bob", "cat"]


def test_cohort_csv_refusals_name_the_field(api: httpx.Client) -> None:
    cohorts = f"{P}/cohorts/"
    _error(api.post(cohorts, **_csv_upload("bad", b"\xff\xfe\x00x")), 400, "csv")
    _error(api.post(cohorts, **_csv_upload("empty", b"\n , \n")), 400, "csv")
    _error(api.post(cohorts, **_csv_upload("long", b"x" * 201)), 400, "csv")
    _error(api.post(cohorts, **_csv_upload("dyn", b"a", is_static="false")), 400, "is_static")
    _error(api.post(cohorts, **_csv_upload("odd", b"a", is_static="maybe")), 400, "is_static")
    dynamic = api.post(
        cohorts,
        json={
            "name": "dynamic",
            "filters": {"properties": {"type": "AND", "values": [
                {"key": "plan", "type": "person", "operator": "exact", "value": "pro"}]}},
        },
    )  # fmt: skip
    assert dynamic.status_code == 201, dynamic.text
    _error(api.patch(f"{cohorts}{dynamic.json()['id']}/", files={"csv": ("a.csv", b"a")}),
           400, "csv")  # fmt: skip
    garbled = api.post(
        cohorts, content=b"no parts here", headers={"Content-Type": "multipart/form-data; x=y"}
    )
    assert garbled.status_code == 400 and garbled.json()["code"] == "parse_error"
    huge = api.post(cohorts, **_csv_upload("huge", b"a\n" * (5 * 1024 * 1024 + 1)))
    assert huge.status_code in (400, 413)


def test_groups_are_listed_and_searched_by_key(api: httpx.Client, server: Server) -> None:
    batch = [
        {"event": "$groupidentify", "distinct_id": "g-user", "properties": {
            "$group_type": "organization", "$group_key": key, "$group_set": {"seats": n}}}
        for n, key in enumerate(["Acme-EU", "acme-us", "globex"])
    ]  # fmt: skip
    sent = httpx.post(f"{server.url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
    assert sent.status_code == 200
    types = {g["group_type"]: g["group_type_index"] for g in api.get(f"{P}/groups_types/").json()}
    index = types["organization"]
    everything = api.get(f"{P}/groups/", params={"group_type_index": index})
    assert everything.status_code == 200
    msgspec.convert(everything.json(), t.GroupPage)
    assert [g["group_key"] for g in everything.json()["results"]] == [
        "Acme-EU",
        "acme-us",
        "globex",
    ]
    found = api.get(f"{P}/groups/", params={"group_type_index": index, "search": "ACME"}).json()
    assert [g["group_properties"]["seats"] for g in found["results"]] == [0, 1]
    first = api.get(f"{P}/groups/", params={"group_type_index": index, "limit": 2}).json()
    assert len(first["results"]) == 2 and first["next"] is not None
    rest = httpx.get(first["next"], headers=api.headers).json()
    assert [g["group_key"] for g in rest["results"]] == ["globex"] and rest["next"] is None
    _error(api.get(f"{P}/groups/"), 400, "group_type_index")
    _error(api.get(f"{P}/groups/", params={"group_type_index": 9}), 400, "group_type_index")


def test_rename_the_project(api: httpx.Client) -> None:
    renamed = api.patch(f"{P}/", json={"name": "  Shop  "})
    assert renamed.status_code == 200 and renamed.json()["name"] == "Shop"
    msgspec.convert(renamed.json(), schemas.Project)
    assert api.get(f"{P}/").json()["name"] == "Shop"
    _error(api.patch(f"{P}/", json={"name": " "}), 400, "name")
    _error(api.patch(f"{P}/", json={"name": "x" * 201}), 400, "name")


def test_event_retention_is_set_and_cleared(api: httpx.Client) -> None:
    assert api.get(f"{P}/").json()["event_retention_days"] is None  # forever by default
    kept = api.patch(f"{P}/", json={"event_retention_days": 30})
    assert kept.status_code == 200, kept.text
    body = msgspec.convert(kept.json(), schemas.ProjectSettings)
    assert body.event_retention_days == 30 and body.name  # the name is left as it was
    assert api.get(f"{P}/").json()["event_retention_days"] == 30
    for bad in (0, -1, 36501, 1.5, "30", True):
        _error(api.patch(f"{P}/", json={"event_retention_days": bad}), 400, "event_retention_days")
    both = api.patch(f"{P}/", json={"name": "Kept", "event_retention_days": None}).json()
    assert both["name"] == "Kept" and both["event_retention_days"] is None
    assert api.get(f"{P}/").json()["event_retention_days"] is None
    _error(api.patch(f"{P}/", json={}), 400, "name")


def test_ingestion_warnings_are_kept_bounded(api: httpx.Client, server: Server) -> None:
    bad = [{"event": "", "distinct_id": "w"} for _ in range(WARNINGS_KEPT + 5)]
    sent = httpx.post(f"{server.url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": bad})
    assert sent.status_code == 200
    page = api.get(f"{P}/ingestion_warnings/", params={"limit": 5}).json()
    assert page["count"] == WARNINGS_KEPT
    assert page["results"][0]["type"] == "missing_event_name"


def test_the_new_routes_are_documented(api: httpx.Client) -> None:
    document = api.get("/api/schema/").json()
    paths = document["paths"]
    assert set(paths["/api/projects/{project_id}/members/"]) == {"get", "post"}
    assert set(paths["/api/projects/{project_id}/members/{user_id}/"]) == {"patch", "delete"}
    assert "get" in paths["/api/projects/{project_id}/groups/"]
    assert "patch" in paths["/api/projects/{project_id}/"]
    upload = paths["/api/projects/{project_id}/cohorts/"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in upload
