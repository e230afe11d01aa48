"""Approvals against the real server (SQLite or PostgreSQL): with the project's policy on, flag
writes become change requests that only someone else may approve; approval applies them in one
transaction, a request made stale by another change is refused, and /flags serves nothing of a
request until it is applied."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import msgspec
import pytest

from flagstaff.http import approval_schemas
from tests.api.people import make_user, session, user_api
from tests.server import PROJECT_TOKEN, Api, Server

P = "/api/projects/@current"
ADMIN = "admin@example.com"
EDITOR = "editor@example.com"
OTHER_EDITOR = "second@example.com"
VIEWER = "viewer@example.com"


class People:
    def __init__(self, server: Server) -> None:
        self.server = server
        for email, role in ((EDITOR, "editor"), (OTHER_EDITOR, "editor"), (VIEWER, "viewer")):
            make_user(server, email, role)
        self.admin = user_api(server, ADMIN)
        self.editor = user_api(server, EDITOR)
        self.other = user_api(server, OTHER_EDITOR)
        self.viewer = user_api(server, VIEWER)

    def policy(self, enabled: bool) -> None:
        answer = self.admin.patch(f"{P}/approval_policy/", json={"enabled": enabled})
        assert answer.status_code == 200, answer.text
        assert answer.json()["enabled"] is enabled

    def flag(self, **extra: Any) -> dict[str, Any]:
        key = f"appr-{uuid.uuid4().hex[:8]}"
        body = {"key": key, "filters": {"groups": [{"rollout_percentage": 100}]}, **extra}
        return self.editor.create_flag(**body)


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Iterator[People]:
    from tests.api.people import PASSWORD

    server = Server(
        tmp_path_factory.mktemp("approvals") / "data",
        env={"FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN, "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD},
    ).start()
    try:
        yield People(server)
    finally:
        server.stop()


def _error(answer: httpx.Response, status: int, code: str, attr: str | None = None) -> None:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["code"] == code, body
    assert body["attr"] == attr, body


def _flags_value(server: Server, key: str) -> Any:
    answer = httpx.post(
        f"{server.url}/flags?v=2", json={"api_key": PROJECT_TOKEN, "distinct_id": "u1"}
    )
    assert answer.status_code == 200, answer.text
    shown = answer.json()["flags"].get(key)  # an inactive flag is not listed
    return bool(shown and shown["enabled"])


def _eventually(read: Any, expected: Any) -> None:
    for _ in range(100):
        if read() == expected:
            return
        time.sleep(0.05)
    assert read() == expected


def test_the_policy_is_read_by_anyone_and_changed_by_admins_only(people: People) -> None:
    assert people.viewer.get(f"{P}/approval_policy/").json()["enabled"] in (True, False)
    _error(
        people.editor.patch(f"{P}/approval_policy/", json={"enabled": True}),
        403,
        "permission_denied",
    )
    _error(people.admin.patch(f"{P}/approval_policy/", json={}), 400, "required", "enabled")
    _error(
        people.admin.patch(f"{P}/approval_policy/", json={"enabled": "yes"}),
        400,
        "required",
        "enabled",
    )
    people.policy(True)
    shown = people.viewer.get(f"{P}/approval_policy/").json()
    assert shown["enabled"] is True and shown["updated_by"]["id"] > 0
    log = people.admin.get(f"{P}/activity_log/", params={"scope": "Project"}).json()
    assert log["results"][0]["detail"]["changes"][0]["field"] == "approval_required"
    people.policy(False)


def test_a_held_change_goes_live_only_when_someone_else_approves(people: People) -> None:
    people.policy(False)
    flag = people.flag()
    server = people.server
    _eventually(lambda: _flags_value(server, flag["key"]), True)
    people.policy(True)

    held = people.editor.patch(f"{P}/feature_flags/{flag['id']}/", json={"active": False})
    assert held.status_code == 202, held.text
    request = held.json()
    msgspec.convert(request, approval_schemas.ChangeRequest)
    assert request["status"] == "pending" and request["kind"] == "update"
    assert request["record_id"] == str(flag["id"]) and request["base_version"] == flag["version"]
    assert [c["field"] for c in request["changes"]] == ["active"]
    editor_id = request["created_by"]["id"]

    # Nothing is live yet: the flag and /flags are as they were.
    unchanged = people.admin.get(f"{P}/feature_flags/{flag['id']}/").json()
    assert unchanged["active"] is True and unchanged["version"] == flag["version"]
    assert _flags_value(server, flag["key"]) is True

    listed = people.viewer.get(f"{P}/change_requests/", params={"status": "pending"}).json()
    msgspec.convert(listed, approval_schemas.ChangeRequestPage)
    assert request["id"] in [r["id"] for r in listed["results"]]
    by_flag = people.viewer.get(f"{P}/change_requests/", params={"record_id": flag["id"]})
    assert [r["id"] for r in by_flag.json()["results"]] == [request["id"]]

    approve = f"{P}/change_requests/{request['id']}/approve/"
    _error(people.editor.post(approve, json={}), 403, "permission_denied")  # its author
    _error(people.viewer.post(approve, json={}), 403, "permission_denied")
    _error(people.admin.post(approve, json={"comment": 5}), 400, "invalid_input", "comment")
    assert _flags_value(server, flag["key"]) is True

    approved = people.admin.post(approve, json={"comment": "looks right"})
    assert approved.status_code == 200, approved.text
    done = approved.json()
    assert done["status"] == "applied" and done["comment"] == "looks right"
    admin_id = done["decided_by"]["id"]
    assert admin_id != editor_id

    now = people.admin.get(f"{P}/feature_flags/{flag['id']}/").json()
    assert now["active"] is False and now["version"] == flag["version"] + 1
    _eventually(lambda: _flags_value(server, flag["key"]), False)

    # The flag's history says who asked and who approved.
    history = people.admin.get(f"{P}/feature_flags/{flag['id']}/activity/").json()["results"]
    latest = history[0]
    assert latest["activity"] == "updated" and latest["user"]["email"] == EDITOR
    trigger = latest["detail"]["trigger"]
    assert trigger["job_type"] == "approval" and trigger["job_id"] == str(request["id"])
    assert trigger["payload"]["approved_by"] == admin_id
    assert trigger["payload"]["approved_by_email"] == ADMIN
    requests_log = people.admin.get(
        f"{P}/activity_log/", params={"scope": "ChangeRequest", "item_id": str(request["id"])}
    ).json()["results"]
    assert [e["activity"] for e in requests_log] == ["updated", "created"]
    assert requests_log[0]["user"]["email"] == ADMIN
    assert requests_log[1]["user"]["email"] == EDITOR

    _error(people.other.post(approve, json={}), 409, "already_decided")
    people.policy(False)


def test_a_request_made_stale_by_another_change_is_refused(people: People) -> None:
    people.policy(True)
    flag = people.flag()
    path = f"{P}/feature_flags/{flag['id']}/"
    first = people.editor.patch(path, json={"filters": {"groups": [{"rollout_percentage": 10}]}})
    second = people.other.patch(path, json={"filters": {"groups": [{"rollout_percentage": 20}]}})
    assert first.status_code == second.status_code == 202
    applied = people.editor.post(f"{P}/change_requests/{second.json()['id']}/approve/", json={})
    assert applied.status_code == 200, applied.text
    stale = people.other.post(f"{P}/change_requests/{first.json()['id']}/approve/", json={})
    _error(stale, 409, "stale")
    assert "changed since" in stale.json()["detail"]
    shown = people.viewer.get(f"{P}/change_requests/{first.json()['id']}/").json()
    assert shown["status"] == "stale" and shown["changes"] is None
    now = people.admin.get(path).json()
    assert now["filters"]["groups"][0]["rollout_percentage"] == 20
    people.policy(False)


def test_deletes_rollbacks_and_schedules_are_held_too(people: People) -> None:
    people.policy(False)
    flag = people.flag()
    path = f"{P}/feature_flags/{flag['id']}/"
    assert people.editor.patch(path, json={"name": "v2"}).status_code == 200
    people.policy(True)

    deleted = people.editor.delete(path)
    assert deleted.status_code == 202, deleted.text
    assert deleted.json()["kind"] == "delete"
    assert people.admin.get(path).json()["deleted"] is False
    rejected = people.admin.post(
        f"{P}/change_requests/{deleted.json()['id']}/reject/", json={"comment": "keep it"}
    )
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert rejected.json()["comment"] == "keep it"
    _error(
        people.other.post(f"{P}/change_requests/{deleted.json()['id']}/approve/", json={}),
        409,
        "already_decided",
    )

    rollback = people.editor.post(f"{path}rollback/", json={"version": 1})
    assert rollback.status_code == 202, rollback.text
    assert [c["field"] for c in rollback.json()["changes"]] == ["name"]
    withdrawn = people.editor.post(f"{P}/change_requests/{rollback.json()['id']}/reject/", json={})
    assert withdrawn.status_code == 200 and withdrawn.json()["status"] == "rejected"

    when = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    schedule = {
        "record_id": flag["id"],
        "payload": {"operation": "update_status", "value": False},
        "scheduled_at": when,
    }
    held = people.editor.post(f"{P}/scheduled_changes/", json=schedule)
    assert held.status_code == 202, held.text
    assert held.json()["kind"] == "schedule"
    assert held.json()["scheduled_change"]["payload"] == schedule["payload"]
    listed = people.admin.get(f"{P}/scheduled_changes/", params={"record_id": flag["id"]})
    assert listed.json()["count"] == 0
    ok = people.other.post(f"{P}/change_requests/{held.json()['id']}/approve/", json={})
    assert ok.status_code == 200, ok.text
    made = people.admin.get(f"{P}/scheduled_changes/", params={"record_id": flag["id"]}).json()
    assert made["count"] == 1
    assert made["results"][0]["payload"] == schedule["payload"]
    assert made["results"][0]["created_by"]["id"] == held.json()["created_by"]["id"]
    assert people.admin.get(path).json()["active"] is True  # not due yet
    people.policy(False)


def test_who_may_reject_and_bad_input(people: People) -> None:
    people.policy(True)
    flag = people.flag()
    held = people.editor.patch(f"{P}/feature_flags/{flag['id']}/", json={"name": "x"}).json()
    reject = f"{P}/change_requests/{held['id']}/reject/"
    _error(people.viewer.post(reject, json={}), 403, "permission_denied")
    _error(people.other.post(reject, json=[1]), 400, "invalid_input")
    _error(people.other.post(reject, json={"comment": "x" * 1001}), 400, "invalid_input", "comment")
    _error(
        people.viewer.get(f"{P}/change_requests/", params={"status": "maybe"}),
        400,
        "invalid_input",
        "status",
    )
    _error(
        people.viewer.get(f"{P}/change_requests/", params={"record_id": "abc"}),
        400,
        "invalid_input",
        "record_id",
    )
    _error(people.viewer.get(f"{P}/change_requests/999999/"), 404, "not_found")
    _error(people.admin.post(f"{P}/change_requests/999999/approve/", json={}), 404, "not_found")
    # an invalid flag is refused before any request is stored
    bad = people.editor.patch(f"{P}/feature_flags/{flag['id']}/", json={"key": "no spaces"})
    _error(bad, 400, "invalid_input", "key")
    # a write that changes nothing is not held
    same = people.editor.patch(f"{P}/feature_flags/{flag['id']}/", json={"active": True})
    assert same.status_code == 200 and same.json()["version"] == flag["version"]
    assert people.other.post(reject, json={"comment": "no"}).json()["status"] == "rejected"
    people.policy(False)


def test_sessions_go_through_the_same_rules(people: People) -> None:
    people.policy(True)
    flag = people.flag()
    with session(people.server, EDITOR) as browser:
        held = browser.patch(f"{P}/feature_flags/{flag['id']}/", json={"active": False})
        assert held.status_code == 202, held.text
        own = browser.post(f"{P}/change_requests/{held.json()['id']}/approve/", json={})
        _error(own, 403, "permission_denied")
    with session(people.server, OTHER_EDITOR) as browser:
        ok = browser.post(f"{P}/change_requests/{held.json()['id']}/approve/", json={})
        assert ok.status_code == 200, ok.text
    assert people.admin.get(f"{P}/feature_flags/{flag['id']}/").json()["active"] is False
    people.policy(False)


def test_policy_off_writes_apply_at_once(people: People) -> None:
    people.policy(False)
    flag = people.flag()
    answer = people.editor.patch(f"{P}/feature_flags/{flag['id']}/", json={"active": False})
    assert answer.status_code == 200 and answer.json()["active"] is False


def test_a_bootstrap_key_cannot_approve_its_own_request(people: People) -> None:
    people.policy(True)
    flag = people.flag()
    key = Api(people.server.url)  # the init key: no user, acts as admin
    held = key.patch(f"{P}/feature_flags/{flag['id']}/", json={"active": False}).json()
    assert held["created_by"] is None
    _error(
        key.post(f"{P}/change_requests/{held['id']}/approve/", json={}), 403, "permission_denied"
    )
    ok = people.admin.post(f"{P}/change_requests/{held['id']}/approve/", json={})
    assert ok.status_code == 200, ok.text
    people.policy(False)
