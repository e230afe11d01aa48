"""Accounts against the real server: console sessions and keys on the management API, one role
check for both, key revocation, admin-only projects, the activity log and rollback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Server

ADMIN_EMAIL = "admin@example.com"
ADMIN_PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        tmp_path_factory.mktemp("accounts") / "data",
        env={
            "FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN_EMAIL,
            "FLAGSTAFF_INIT_ADMIN_PASSWORD": ADMIN_PASSWORD,
        },
    ).start()
    yield srv
    srv.stop()


def key_client(server: Server, key: str = PERSONAL_KEY) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30.0
    )


def log_in(server: Server, email: str, password: str) -> tuple[httpx.Client, str]:
    """A browser-like client logged in through the login form, and its page's CSRF token."""
    client = httpx.Client(base_url=server.url, timeout=30.0)
    form = client.get("/login")
    assert form.status_code == 200
    login_csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert login_csrf is not None
    done = client.post(
        "/login",
        data={"email": email, "password": password, "csrf_token": login_csrf.group(1)},
        headers={"Origin": server.url},
    )
    assert done.status_code == 303, done.text
    page = client.get("/feature_flags")
    assert page.status_code == 200
    token = re.search(r'<meta name="csrf-token" content="([^"]+)"', page.text)
    assert token is not None
    return client, token.group(1)


def run_cli(server: Server, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env_args = ["--data-dir", str(server.data_dir)]
    env = {**os.environ}
    if server.database_url:
        env["FLAGSTAFF_DATABASE_URL"] = server.database_url
    return subprocess.run(
        [sys.executable, "-m", "flagstaff", *args, *env_args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )


def test_session_writes_need_the_csrf_header_and_same_origin(server: Server) -> None:
    client, csrf = log_in(server, ADMIN_EMAIL, ADMIN_PASSWORD)
    flag = {"key": "session-made", "filters": {"groups": [{"rollout_percentage": 100}]}}
    path = "/api/projects/@current/feature_flags/"
    refused = client.post(path, json=flag)
    assert refused.status_code == 403 and refused.json()["code"] == "csrf_failed"
    cross = client.post(
        path, json=flag, headers={"X-CSRF-Token": csrf, "Origin": "https://evil.example"}
    )
    assert cross.status_code == 403
    made = client.post(path, json=flag, headers={"X-CSRF-Token": csrf, "Origin": server.url})
    assert made.status_code == 201, made.text
    assert client.get(path).status_code == 200  # reads need no token


def test_api_and_console_send_no_cors_headers(server: Server) -> None:
    origin = {"Origin": "https://elsewhere.example"}
    with key_client(server) as api:
        answer = api.get("/api/projects/@current/feature_flags/", headers=origin)
    assert answer.status_code == 200
    assert not any(h.lower().startswith("access-control-") for h in answer.headers)
    page = httpx.get(server.url + "/login", headers=origin)
    assert not any(h.lower().startswith("access-control-") for h in page.headers)
    public = httpx.post(
        server.url + "/flags", json={"api_key": PROJECT_TOKEN, "distinct_id": "x"}, headers=origin
    )
    assert public.headers.get("access-control-allow-origin")


def test_viewer_cannot_change_anything_through_session_or_key(server: Server) -> None:
    made = run_cli(
        server, "user", "create", "--email", "viewer@example.com", "--password", "-",
        "--role", "viewer", stdin="viewer password 123\n",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "created" in made.stdout
    client, csrf = log_in(server, "viewer@example.com", "viewer password 123")
    headers = {"X-CSRF-Token": csrf, "Origin": server.url}
    flags = "/api/projects/@current/feature_flags/"
    assert client.get(flags).status_code == 200
    refused = client.post(flags, json={"key": "nope"}, headers=headers)
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
    # the viewer's own key: readable, and refused writes too
    key = client.post("/api/personal_api_keys/", json={"label": "mine"}, headers=headers)
    assert key.status_code == 201, key.text
    with key_client(server, key.json()["value"]) as api:
        assert api.get(flags).status_code == 200
        assert api.post(flags, json={"key": "nope"}).status_code == 403
        assert api.post("/api/projects/", json={"name": "mine"}).status_code == 403
    # and the console's editor is closed to them
    assert client.get("/feature_flags/new").status_code == 403


def test_keys_are_listed_without_secrets_and_revoked_keys_stop_at_once(server: Server) -> None:
    client, csrf = log_in(server, ADMIN_EMAIL, ADMIN_PASSWORD)
    headers = {"X-CSRF-Token": csrf, "Origin": server.url}
    created = client.post("/api/personal_api_keys/", json={"label": "ci"}, headers=headers)
    assert created.status_code == 201
    body = created.json()
    secret = body["value"]
    assert secret.startswith("phx_") and body["prefix"] == secret[:8]
    with key_client(server, secret) as api:
        assert api.get("/api/projects/@current/feature_flags/").status_code == 200
        listed = client.get("/api/personal_api_keys/").json()
        mine = next(k for k in listed if k["id"] == body["id"])
        assert mine["last_used_at"] is not None and mine["revoked"] is False
        assert secret not in str(listed)
        gone = client.delete(f"/api/personal_api_keys/{body['id']}/", headers=headers)
        assert gone.status_code == 204
        refused = api.get("/api/projects/@current/feature_flags/")
        assert refused.status_code == 401
        assert api.get("/api/feature_flag/local_evaluation").status_code == 401
    listed = client.get("/api/personal_api_keys/").json()
    assert next(k for k in listed if k["id"] == body["id"])["revoked"] is True
    log = client.get("/api/projects/@current/activity_log/?scope=PersonalAPIKey").json()
    assert [e["activity"] for e in log["results"][:2]] == ["revoked", "created"]
    assert log["results"][0]["user"]["email"] == ADMIN_EMAIL


def test_creating_projects_needs_an_admin(server: Server) -> None:
    run_cli(
        server, "user", "create", "--email", "editor@example.com", "--password",
        "editor password 123", "--role", "editor",
    )  # fmt: skip
    client, csrf = log_in(server, "editor@example.com", "editor password 123")
    headers = {"X-CSRF-Token": csrf, "Origin": server.url}
    refused = client.post("/api/projects/", json={"name": "side"}, headers=headers)
    assert refused.status_code == 403
    made = client.post(
        "/api/projects/@current/feature_flags/", json={"key": "editor-flag"}, headers=headers
    )
    assert made.status_code == 201  # editors edit
    admin, admin_csrf = log_in(server, ADMIN_EMAIL, ADMIN_PASSWORD)
    project = admin.post(
        "/api/projects/",
        json={"name": "second"},
        headers={"X-CSRF-Token": admin_csrf, "Origin": server.url},
    )
    assert project.status_code == 201
    new_id = project.json()["id"]
    assert admin.get(f"/api/projects/{new_id}/feature_flags/").status_code == 200


def test_flag_history_in_posthogs_shape_and_rollback(server: Server) -> None:
    with key_client(server) as api:
        base = "/api/projects/@current/feature_flags/"
        flag = api.post(
            base,
            json={"key": "history", "filters": {"groups": [{"rollout_percentage": 10}]}},
        ).json()
        path = f"{base}{flag['id']}/"
        api.patch(path, json={"filters": {"groups": [{"rollout_percentage": 50}]}})
        api.patch(path, json={"name": "renamed"})
        activity = api.get(path + "activity/?limit=2").json()
        assert activity["total_count"] == 3
        assert [e["activity"] for e in activity["results"]] == ["updated", "updated"]
        assert activity["next"] is not None
        newest = activity["results"][0]
        assert newest["scope"] == "FeatureFlag" and newest["item_id"] == str(flag["id"])
        assert newest["detail"]["changes"] == [
            {"type": "FeatureFlag", "action": "changed", "field": "name", "before": "",
             "after": "renamed"}
        ]  # fmt: skip
        assert newest["detail"]["name"] == "history"
        rolled = api.post(path + "rollback/", json={"version": 1})
        assert rolled.status_code == 200, rolled.text
        restored = rolled.json()
        assert restored["filters"]["groups"][0]["rollout_percentage"] == 10
        assert restored["version"] == 4
        latest = api.get(path + "activity/").json()["results"][0]
        assert latest["activity"] == "rolled_back"
        assert latest["detail"]["trigger"]["payload"] == {"from_version": 3, "to_version": 1}
        bad = api.post(path + "rollback/", json={"version": 99})
        assert bad.status_code == 400 and "no version 99" in bad.json()["detail"]
        log = api.get(
            f"/api/projects/@current/activity_log/?scope=FeatureFlag&item_id={flag['id']}"
        ).json()
        assert len(log["results"]) == 4


def test_user_create_is_idempotent_and_never_changes_a_password(server: Server) -> None:
    again = run_cli(
        server, "user", "create", "--email", ADMIN_EMAIL, "--password", "another password 1",
        "--project", "1",
    )  # fmt: skip
    assert again.returncode == 0 and "exists already" in again.stdout
    log_in(server, ADMIN_EMAIL, ADMIN_PASSWORD)  # the old password still works
    weak = run_cli(
        server, "user", "create", "--email", "w@example.com", "--password", "short",
        "--project", "1",
    )  # fmt: skip
    assert weak.returncode != 0 and "password" in weak.stderr


def test_a_scheduled_change_runs_once_when_due_and_is_logged(server: Server) -> None:
    from datetime import UTC, datetime, timedelta

    with key_client(server) as api:
        base = "/api/projects/@current"
        flag = api.post(
            f"{base}/feature_flags/",
            json={"key": "launch", "filters": {"groups": [{"rollout_percentage": 100}]}},
        ).json()
        assert flag["active"] is True
        soon = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
        bad = api.post(
            f"{base}/scheduled_changes/",
            json={
                "record_id": flag["id"],
                "payload": {"operation": "launch"},
                "scheduled_at": soon,
            },
        )
        assert bad.status_code == 400 and bad.json()["attr"] == "payload"
        past = api.post(
            f"{base}/scheduled_changes/",
            json={
                "record_id": flag["id"],
                "payload": {"operation": "update_status", "value": False},
                "scheduled_at": "2001-01-01T00:00:00Z",
            },
        )
        assert past.status_code == 400 and past.json()["attr"] == "scheduled_at"
        made = api.post(
            f"{base}/scheduled_changes/",
            json={
                "record_id": flag["id"],
                "model_name": "FeatureFlag",
                "payload": {"operation": "update_status", "value": False},
                "scheduled_at": soon,
            },
        )
        assert made.status_code == 201, made.text
        change = made.json()
        assert change["record_id"] == str(flag["id"]) and change["executed_at"] is None
        cancelled = api.post(
            f"{base}/scheduled_changes/",
            json={
                "record_id": flag["id"],
                "payload": {"operation": "update_rollout", "value": 5},
                "scheduled_at": soon,
            },
        ).json()
        assert api.delete(f"{base}/scheduled_changes/{cancelled['id']}/").status_code == 204
        for _ in range(100):
            current = api.get(f"{base}/feature_flags/{flag['id']}/").json()
            if current["active"] is False:
                break
            time.sleep(0.1)
        assert current["active"] is False and current["version"] == 2
        assert current["filters"]["groups"][0]["rollout_percentage"] == 100  # cancelled one
        listed = api.get(f"{base}/scheduled_changes/?record_id={flag['id']}").json()["results"]
        assert [c["id"] for c in listed] == [change["id"]]
        assert listed[0]["executed_at"] is not None and listed[0]["failure_reason"] is None
        newest = api.get(f"{base}/feature_flags/{flag['id']}/activity/").json()["results"][0]
        assert newest["is_system"] is True
        assert newest["detail"]["trigger"]["job_type"] == "scheduled_change"
        assert newest["detail"]["changes"][0]["field"] == "active"
