"""The console's journeys in a real browser (Playwright for Python, Debian's Chromium) against
the real server (``tests/server.py``, SQLite or PostgreSQL by ``FLAGSTAFF_TEST_BACKEND``):
first login, flags made and changed in the editor and answered by ``/flags``, rollback from the
history, keys created and revoked, a viewer who cannot edit, live events."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Server

CHROMIUM = Path(os.environ.get("FLAGSTAFF_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ROOT = Path(__file__).parents[2]
ADMIN_EMAIL = "admin@example.com"
EDITOR_EMAIL = "editor@example.com"
VIEWER_EMAIL = "viewer@example.com"
PASSWORD = "correct horse battery"

sync_api = pytest.importorskip("playwright.sync_api")

LOCAL_TIME_IN_3S = """() => {
  const d = new Date(Date.now() + 3000);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}` +
    `T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}"""


class Seeded:
    """The console server and what was made in it before the browser came."""

    def __init__(self, server: Server, ids: dict[str, int]) -> None:
        self.server = server
        self.url = server.url
        self.ids = ids
        self.api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {PERSONAL_KEY}"}, timeout=30
        )

    def flag(self, flag_id: int) -> dict[str, Any]:
        answer = self.api.get(f"/api/projects/@current/feature_flags/{flag_id}/")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def flag_by_key(self, key: str) -> dict[str, Any] | None:
        flags = self.api.get("/api/projects/@current/feature_flags/").json()["results"]
        return next((f for f in flags if f["key"] == key), None)

    def wait_for_version(self, flag_id: int, version: int) -> dict[str, Any]:
        for _ in range(100):
            flag = self.flag(flag_id)
            if flag["version"] >= version:
                return flag
            time.sleep(0.05)
        raise AssertionError(f"flag {flag_id} never reached version {version}: {flag}")

    def flags_for(self, distinct_id: str, **properties: Any) -> dict[str, Any]:
        """What /flags answers the SDKs for this person (definitions refresh in 0.2 s)."""
        answer = httpx.post(
            f"{self.url}/flags?v=2",
            json={
                "api_key": PROJECT_TOKEN,
                "distinct_id": distinct_id,
                "person_properties": properties,
            },
        )
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["flags"])


def _cli(server: Server, *args: str) -> None:
    env = {**os.environ}
    if server.database_url:
        env["FLAGSTAFF_DATABASE_URL"] = server.database_url
    done = subprocess.run(
        [sys.executable, "-m", "flagstaff", *args, "--data-dir", str(server.data_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    server = Server(
        tmp_path_factory.mktemp("console") / "data",
        env={"FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN_EMAIL, "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD},
    ).start()
    try:
        for email, role in ((EDITOR_EMAIL, "editor"), (VIEWER_EMAIL, "viewer")):
            _cli(server, "user", "create", "--email", email, "--password", PASSWORD, "--role", role)
        api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {PERSONAL_KEY}"}, timeout=30
        )
        base = "/api/projects/@current"
        assert api.post(f"{base}/groups_types/", json={"group_type": "company"}).status_code in (
            200,
            201,
        )
        cohort = api.post(
            f"{base}/cohorts/", json={"name": "Beta testers", "is_static": True}
        ).json()
        dark = api.post(
            f"{base}/feature_flags/",
            json={"key": "dark-mode", "filters": {"groups": [{"rollout_percentage": 100}]}},
        ).json()
        yield Seeded(server, {"cohort": cohort["id"], "dark-mode": dark["id"]})
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context()  # type: ignore[attr-defined]
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, errors


def _log_in(page: Any, url: str, email: str, password: str = PASSWORD) -> None:
    page.goto(f"{url}/feature_flags")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{url}/feature_flags")


def test_first_login_with_the_init_admin(page: Any, console: Seeded) -> None:
    page.goto(console.url)
    page.wait_for_url(f"{console.url}/login")
    page.get_by_label("Email").fill(ADMIN_EMAIL)
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Log in").click()
    assert page.get_by_text("The email or password is not right.").is_visible()
    assert page.url.startswith(f"{console.url}/login")
    _log_in(page, console.url, ADMIN_EMAIL)
    assert page.get_by_role("link", name="dark-mode").is_visible()
    assert page.get_by_text("admin", exact=True).is_visible()


def test_create_a_flag_with_a_condition_and_a_payload_then_flags_answers_it(
    page: Any, console: Seeded
) -> None:
    _log_in(page, console.url, EDITOR_EMAIL)
    page.get_by_role("link", name="New feature flag").click()
    page.get_by_label("Key", exact=True).fill("pro-banner")
    first = page.get_by_role("group", name="Condition set 1")
    first.get_by_role("button", name="Add filter to condition set 1").click()
    email = first.get_by_role("group", name="Filter 1")
    email.get_by_label("Property name").fill("email")
    email.get_by_label("Operator").select_option("ends_with")
    email.get_by_label("Value (one per line for a list)").fill("@example.com")
    first.get_by_label("Rollout percentage").fill("100")
    page.get_by_label("Payload when the flag is on (JSON)").fill('{"banner": "pro"}')
    page.get_by_role("button", name="Create feature flag").click()
    page.wait_for_url(re.compile(r".*/feature_flags/\d+$"))
    made = console.flag_by_key("pro-banner")
    assert made is not None and made["active"] is True

    def answer(distinct_id: str, mail: str) -> Any:
        return console.flags_for(distinct_id, email=mail).get("pro-banner")

    for _ in range(50):  # the workers' definitions refresh every 0.2 s
        matching = answer("ann", "ann@example.com")
        if matching and matching["enabled"]:
            break
        time.sleep(0.1)
    assert matching["enabled"] is True
    assert matching["metadata"]["payload"] in ('{"banner": "pro"}', {"banner": "pro"})
    assert answer("bob", "bob@elsewhere.org")["enabled"] is False

    # Change it in the editor: /flags follows.
    page.goto(f"{console.url}/feature_flags/{made['id']}")
    page.get_by_role("group", name="Filter 1").get_by_label("Value (one per line for a list)").fill(
        "@elsewhere.org"
    )
    page.get_by_role("button", name="Save feature flag").click()
    console.wait_for_version(made["id"], 2)
    for _ in range(50):
        if answer("bob", "bob@elsewhere.org")["enabled"]:
            break
        time.sleep(0.1)
    assert answer("bob", "bob@elsewhere.org")["enabled"] is True
    assert answer("ann", "ann@example.com")["enabled"] is False

    # Roll it back from its history: ann is in again, bob out.
    page.goto(f"{console.url}/feature_flags/{made['id']}/history")
    history = page.locator("[data-flag-history]")
    assert f"Updated by {EDITOR_EMAIL}" in history.inner_text()
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Roll back to version 1").click()
    restored = console.wait_for_version(made["id"], 3)
    props = restored["filters"]["groups"][0]["properties"]
    assert props[0]["value"] == "@example.com"
    for _ in range(50):
        if answer("ann", "ann@example.com")["enabled"]:
            break
        time.sleep(0.1)
    assert answer("ann", "ann@example.com")["enabled"] is True
    assert answer("bob", "bob@elsewhere.org")["enabled"] is False
    page.reload()
    assert f"Rolled back by {EDITOR_EMAIL}" in page.locator("[data-flag-history]").inner_text()
    activity = console.api.get(
        f"/api/projects/@current/feature_flags/{made['id']}/activity/"
    ).json()
    assert [e["activity"] for e in activity["results"]] == ["rolled_back", "updated", "created"]


def test_the_editor_sends_every_part_of_a_flag(page: Any, console: Seeded) -> None:
    _log_in(page, console.url, EDITOR_EMAIL)
    page.get_by_role("link", name="New feature flag").click()
    page.get_by_label("Key", exact=True).fill("new-checkout")
    page.get_by_label("Description", exact=True).fill("New <checkout>")
    page.get_by_label("Tags (comma separated)").fill("payments, q3")

    first = page.get_by_role("group", name="Condition set 1")
    first.get_by_role("button", name="Add filter to condition set 1").click()
    email = first.get_by_role("group", name="Filter 1")
    email.get_by_label("Property name").fill("email")
    email.get_by_label("Operator").select_option("ends_with")
    email.get_by_label("Value (one per line for a list)").fill("@example.com")
    first.get_by_role("button", name="Add filter to condition set 1").click()
    plan = first.get_by_role("group", name="Filter 2")
    plan.get_by_label("Property name").fill("plan")
    plan.get_by_label("Value (one per line for a list)").fill("pro\nteam")
    first.get_by_role("button", name="Add filter to condition set 1").click()
    cohort = first.get_by_role("group", name="Filter 3")
    cohort.get_by_label("Filter type").select_option("cohort")
    cohort.get_by_label("Membership").select_option("not_in")
    first.get_by_role("button", name="Add filter to condition set 1").click()
    dependency = first.get_by_role("group", name="Filter 4")
    dependency.get_by_label("Filter type").select_option("flag")
    dependency.get_by_label("Flag it depends on").select_option(label="dark-mode")
    first.get_by_role("button", name="Remove filter 2 from condition set 1").click()
    first.get_by_label("Rollout percentage").fill("30")

    page.get_by_role("button", name="Add condition set").click()
    second = page.get_by_role("group", name="Condition set 2")
    second.get_by_role("button", name="Add filter to condition set 2").click()
    company = second.get_by_role("group", name="Filter 1")
    company.get_by_label("Filter type").select_option("group")
    company.get_by_label("Group type").select_option(label="company")
    company.get_by_label("Property name").fill("size")
    company.get_by_label("Operator").select_option("between")
    company.get_by_label("Value (one per line for a list)").fill("10\n100")

    page.get_by_role("button", name="Add variant").click()
    page.get_by_role("button", name="Add variant").click()
    control = page.get_by_role("group", name="Variant 1")
    control.get_by_label("Variant key").fill("control")
    control.get_by_label("Split percentage").fill("50")
    control.get_by_label("Variant payload (JSON)").fill('{"color": "blue"')
    test = page.get_by_role("group", name="Variant 2")
    test.get_by_label("Variant key").fill("test")
    test.get_by_label("Split percentage").fill("50")
    second.get_by_label("Variant override").select_option("test")
    page.get_by_label("Runtime").select_option("server")
    page.get_by_label("Experience continuity", exact=False).check()

    page.get_by_role("button", name="Create feature flag").click()
    assert "Not valid JSON" in page.locator("[data-errors]").inner_text()
    assert page.url.endswith("/feature_flags/new")
    control.get_by_label("Variant payload (JSON)").fill('{"color": "blue"}')
    page.get_by_role("button", name="Create feature flag").click()
    page.wait_for_url(re.compile(r".*/feature_flags/\d+$"))
    sent = console.flag_by_key("new-checkout")
    assert sent is not None
    assert sent["name"] == "New <checkout>" and sent["tags"] == ["payments", "q3"]
    assert sent["evaluation_runtime"] == "server" and sent["ensure_experience_continuity"]
    groups = sent["filters"]["groups"]
    assert groups[0]["rollout_percentage"] == 30
    assert groups[0]["properties"] == [
        {"key": "email", "type": "person", "operator": "ends_with", "value": "@example.com"},
        {"key": "id", "type": "cohort", "operator": "not_in", "value": console.ids["cohort"]},
        {
            "key": str(console.ids["dark-mode"]),
            "type": "flag",
            "operator": "flag_evaluates_to",
            "value": True,
        },
    ]
    assert groups[1]["properties"][0]["group_type_index"] == 0
    assert groups[1]["properties"][0]["value"] == [10, 100]
    assert groups[1]["variant"] == "test"
    assert [v["key"] for v in sent["filters"]["multivariate"]["variants"]] == ["control", "test"]
    assert sent["filters"]["payloads"] == {"control": '{"color": "blue"}'}


def test_create_a_personal_key_use_it_revoke_it(page: Any, console: Seeded) -> None:
    _log_in(page, console.url, EDITOR_EMAIL)
    page.get_by_role("link", name=EDITOR_EMAIL).click()
    page.get_by_label("Key label").fill("deploy script")
    page.get_by_role("button", name="Create personal API key").click()
    shown = page.get_by_label("New personal API key")
    shown.wait_for()
    secret = shown.input_value()
    assert secret.startswith("phx_")
    api = f"{console.url}/api/projects/@current/feature_flags/"
    bearer = {"authorization": f"Bearer {secret}"}
    assert httpx.get(api, headers=bearer).status_code == 200
    created = httpx.post(api, headers=bearer, json={"key": "made-by-key"})
    assert created.status_code == 201  # an editor's key may create flags
    page.reload()
    row = page.get_by_role("row").filter(has_text="deploy script")
    assert secret[:8] in row.inner_text() and secret not in page.content()
    page.on("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():  # the console reloads the page once the key is revoked
        page.get_by_role("button", name="Revoke key deploy script").click()
    for _ in range(50):
        if httpx.get(api, headers=bearer).status_code == 401:
            break
        time.sleep(0.05)
    assert httpx.get(api, headers=bearer).status_code == 401
    page.reload()
    assert "Revoked" in page.get_by_role("row").filter(has_text="deploy script").inner_text()


def test_viewer_sees_a_read_only_editor(page: Any, console: Seeded) -> None:
    _log_in(page, console.url, VIEWER_EMAIL)
    assert page.get_by_role("link", name="New feature flag").count() == 0
    page.get_by_role("link", name="dark-mode").click()
    assert page.get_by_label("Key", exact=True).is_disabled()
    assert page.get_by_role("button", name="Save feature flag").count() == 0
    # Neither the console nor the viewer's own key can change anything.
    page.get_by_role("link", name=VIEWER_EMAIL).click()
    page.get_by_label("Key label").fill("viewer key")
    page.get_by_role("button", name="Create personal API key").click()
    shown = page.get_by_label("New personal API key")
    shown.wait_for()
    bearer = {"authorization": f"Bearer {shown.input_value()}"}
    api = f"{console.url}/api/projects/1/feature_flags/"
    assert httpx.get(api, headers=bearer).status_code == 200
    refused = httpx.post(api, headers=bearer, json={"key": "viewer-flag"})
    assert refused.status_code == 403 and "viewers" in refused.json()["detail"]
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{console.url}/login")


def test_a_live_event_appears(page: Any, console: Seeded) -> None:
    _log_in(page, console.url, VIEWER_EMAIL)
    page.get_by_role("link", name="Live events").click()
    page.wait_for_url(f"{console.url}/events")
    table = page.get_by_role("table", name="Events, newest first")
    sent = httpx.post(
        f"{console.url}/i/v0/e/",
        json={
            "api_key": PROJECT_TOKEN,
            "event": "checkout completed",
            "distinct_id": "live-visitor",
            "properties": {"$current_url": "https://shop.example/checkout"},
        },
    )
    assert sent.status_code == 200
    row = table.get_by_role("row").filter(has_text="checkout completed")
    row.wait_for(timeout=5000)  # polled every second, without reloading the page
    assert "live-visitor" in row.inner_text()
    assert "https://shop.example/checkout" in row.inner_text()


def test_test_a_user_shows_why_step_by_step(page: Any, console: Seeded) -> None:
    made = console.api.post(
        "/api/projects/@current/feature_flags/",
        json={
            "key": "gold-only",
            "filters": {
                "groups": [
                    {
                        "properties": [
                            {"key": "plan", "type": "person", "operator": "exact", "value": "gold"}
                        ],
                        "rollout_percentage": 100,
                    }
                ]
            },
        },
    ).json()
    _log_in(page, console.url, VIEWER_EMAIL)  # reading is enough
    page.goto(f"{console.url}/feature_flags/{made['id']}")
    page.get_by_role("link", name="Test a user").click()
    page.get_by_label("Distinct id").fill("someone")
    page.get_by_label("Person properties (JSON, added to the stored ones)").fill('{"plan": "gold"}')
    page.get_by_role("button", name="Test this user").click()
    result = page.get_by_role("heading", name="Result: enabled")
    result.wait_for()
    steps = page.get_by_label("Evaluation steps").inner_text()
    assert "condition set 1" in steps and "'plan'" in steps and "match" in steps
    page.get_by_label("Person properties (JSON, added to the stored ones)").fill('{"plan": "free"}')
    page.get_by_role("button", name="Test this user").click()
    page.get_by_role("heading", name="Result: not enabled").wait_for()
    page.get_by_label("Person properties (JSON, added to the stored ones)").fill("{not json")
    page.get_by_role("button", name="Test this user").click()
    assert page.get_by_text("Person properties are not valid JSON").is_visible()


def test_a_person_their_properties_flags_and_events(page: Any, console: Seeded) -> None:
    console.api.post(
        "/api/projects/@current/feature_flags/",
        json={
            "key": "team-plan",
            "filters": {
                "groups": [
                    {
                        "properties": [
                            {"key": "plan", "type": "person", "operator": "exact", "value": "team"}
                        ],
                        "rollout_percentage": 100,
                    }
                ]
            },
        },
    )
    sent = httpx.post(
        f"{console.url}/batch/",
        json={
            "api_key": PROJECT_TOKEN,
            "batch": [
                {
                    "event": "$identify",
                    "distinct_id": "pat",
                    "properties": {"$set": {"plan": "team"}},
                },
                {"event": "report opened", "distinct_id": "pat", "properties": {"report": "q3"}},
            ],
        },
    )
    assert sent.status_code == 200
    _log_in(page, console.url, VIEWER_EMAIL)
    page.get_by_role("link", name="Persons").click()
    page.get_by_label("Distinct id").fill("pat")
    page.get_by_role("button", name="Find person").click()
    properties = page.get_by_role("table", name="Properties")
    assert "team" in properties.get_by_role("row").filter(has_text="plan").inner_text()
    flags = page.get_by_role("table", name="Feature flags right now")

    def value_of(key: str) -> str:
        row = flags.get_by_role("row").filter(has=page.get_by_role("link", name=key, exact=True))
        return str(row.get_by_role("cell").nth(1).inner_text())

    assert value_of("team-plan") == "enabled"
    assert value_of("dark-mode") == "enabled"
    console.api.post(
        "/api/projects/@current/feature_flags/",
        json={"key": "nobody-yet", "filters": {"groups": [{"rollout_percentage": 0}]}},
    )
    page.reload()
    assert value_of("nobody-yet") == "not enabled"
    events = page.get_by_role("table", name="Recent events")
    assert "report=q3" in events.get_by_role("row").filter(has_text="report opened").inner_text()
    page.get_by_label("Distinct id").fill("nobody-here")
    page.get_by_role("button", name="Find person").click()
    assert page.get_by_text("No person has the distinct id nobody-here.").is_visible()


def test_schedule_a_flag_to_turn_off(page: Any, console: Seeded) -> None:
    made = console.api.post(
        "/api/projects/@current/feature_flags/",
        json={"key": "night-sale", "filters": {"groups": [{"rollout_percentage": 100}]}},
    ).json()
    _log_in(page, console.url, EDITOR_EMAIL)
    page.goto(f"{console.url}/feature_flags/{made['id']}")
    page.get_by_role("link", name="Scheduled changes").click()
    page.get_by_role("combobox", name="Change").select_option(label="Turn the flag off")
    soon = page.evaluate(LOCAL_TIME_IN_3S)
    page.get_by_label("When (your local time)").fill(soon)
    page.get_by_role("button", name="Schedule change").click()
    table = page.get_by_role("table", name="Scheduled changes")
    table.get_by_role("row").filter(has_text="Turn the flag off").wait_for()
    assert "Pending" in table.inner_text()
    for _ in range(100):
        if console.flag(made["id"])["active"] is False:
            break
        time.sleep(0.1)
    assert console.flag(made["id"])["active"] is False
    page.reload()
    assert "Done" in table.get_by_role("row").filter(has_text="Turn the flag off").inner_text()
    assert page.get_by_role("button", name="Cancel scheduled change").count() == 0
