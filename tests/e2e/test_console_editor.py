"""The console's editor in a real browser (Playwright for Python, Debian's Chromium): driven by
its labels, its script must send the management API bodies the flag rules accept."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.console_app import EDITOR_EMAIL, PASSWORD, VIEWER_EMAIL

CHROMIUM = Path(os.environ.get("FLAGSTAFF_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ROOT = Path(__file__).parents[2]

sync_api = pytest.importorskip("playwright.sync_api")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def console_url() -> Iterator[str]:
    port = _free_port()
    granian = Path(sys.executable).with_name("granian")
    process = subprocess.Popen(
        [
            str(granian),
            "--interface",
            "asgi",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "tests.e2e.console_app:app",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                if httpx.get(f"{url}/login").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            raise RuntimeError("the console test server did not start")
        yield url
    finally:
        process.terminate()
        process.wait(10)


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


def _log_in(page: object, url: str, email: str) -> None:
    page.goto(f"{url}/feature_flags")  # type: ignore[attr-defined]
    page.get_by_label("Email").fill(email)  # type: ignore[attr-defined]
    page.get_by_label("Password").fill(PASSWORD)  # type: ignore[attr-defined]
    page.get_by_role("button", name="Log in").click()  # type: ignore[attr-defined]
    page.wait_for_url(f"{url}/feature_flags")  # type: ignore[attr-defined]


def test_create_a_flag_with_conditions_variants_and_payloads(page, console_url: str) -> None:  # type: ignore[no-untyped-def]
    _log_in(page, console_url, EDITOR_EMAIL)
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
    assert (
        first.get_by_role("group", name="Filter 3").get_by_label("Flag it depends on").is_visible()
    )
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
    alert = page.locator("[data-errors]")
    assert "Not valid JSON" in alert.inner_text()
    assert page.url.endswith("/feature_flags/new")
    control.get_by_label("Variant payload (JSON)").fill('{"color": "blue"}')
    page.get_by_role("button", name="Create feature flag").click()
    page.wait_for_url(f"{console_url}/feature_flags/2")

    sent = httpx.get(f"{console_url}/_test/last_sent").json()
    assert sent["key"] == "new-checkout" and sent["name"] == "New <checkout>"
    assert sent["tags"] == ["payments", "q3"]
    assert sent["evaluation_runtime"] == "server" and sent["ensure_experience_continuity"]
    groups = sent["filters"]["groups"]
    assert groups[0]["rollout_percentage"] == 30
    assert groups[0]["properties"] == [
        {"key": "email", "type": "person", "operator": "ends_with", "value": "@example.com"},
        {"key": "id", "type": "cohort", "operator": "not_in", "value": 3},
        {"key": "1", "type": "flag", "operator": "flag_evaluates_to", "value": True},
    ]
    assert groups[1]["properties"] == [
        {
            "key": "size",
            "type": "group",
            "operator": "between",
            "value": [10, 100],
            "group_type_index": 0,
        }
    ]
    assert groups[1]["variant"] == "test" and groups[1]["rollout_percentage"] == 100
    assert [v["key"] for v in sent["filters"]["multivariate"]["variants"]] == ["control", "test"]
    assert sent["filters"]["payloads"] == {"control": '{"color": "blue"}'}

    # Saved unchanged, the editor sends back what it showed.
    page.get_by_role("button", name="Save feature flag").click()
    page.wait_for_load_state("load")
    for _ in range(50):
        again = httpx.get(f"{console_url}/_test/last_sent").json()
        if again.get("version") == 1:
            break
        time.sleep(0.05)
    assert again["version"] == 1
    assert again["filters"]["groups"] == groups
    assert again["filters"]["multivariate"] == sent["filters"]["multivariate"]
    assert again["filters"]["payloads"] == sent["filters"]["payloads"]
    assert again["tags"] == sent["tags"] and again["name"] == sent["name"]


def test_change_a_flag_then_roll_it_back_from_its_history(page, console_url: str) -> None:  # type: ignore[no-untyped-def]
    _log_in(page, console_url, EDITOR_EMAIL)
    page.get_by_role("link", name="dark-mode").click()
    page.get_by_label("Enabled").uncheck()
    page.get_by_label("Rollout percentage").fill("40")
    page.get_by_role("button", name="Save feature flag").click()
    for _ in range(50):
        if httpx.get(f"{console_url}/_test/flag/1").json()["version"] == 2:
            break
        time.sleep(0.05)
    page.get_by_role("link", name="History and rollback").click()
    history = page.locator("[data-flag-history]")
    assert "Updated by editor@example.com" in history.inner_text()
    assert "Rollout %" in history.inner_text()
    page.on("dialog", lambda dialog: dialog.accept())
    # dark-mode was seeded without history: version 2 is the first recorded one, so the
    # button restores the version just saved; roll back the saved change by saving again.
    assert page.get_by_role("button", name="Roll back to version 2").count() == 0
    page.goto(f"{console_url}/feature_flags/1")
    page.get_by_label("Enabled").check()
    page.get_by_role("button", name="Save feature flag").click()
    for _ in range(50):
        if httpx.get(f"{console_url}/_test/flag/1").json()["version"] == 3:
            break
        time.sleep(0.05)
    page.goto(f"{console_url}/feature_flags/1/history")
    page.get_by_role("button", name="Roll back to version 2").click()
    for _ in range(50):
        flag = httpx.get(f"{console_url}/_test/flag/1").json()
        if flag["version"] == 4:
            break
        time.sleep(0.05)
    assert flag["active"] is False
    assert flag["filters"]["groups"][0]["rollout_percentage"] == 40
    page.wait_for_load_state("load")
    assert "Rolled back by editor@example.com" in page.locator("[data-flag-history]").inner_text()


def test_create_a_personal_key_use_it_revoke_it(page, console_url: str) -> None:  # type: ignore[no-untyped-def]
    _log_in(page, console_url, EDITOR_EMAIL)
    page.get_by_role("link", name=EDITOR_EMAIL).click()
    page.get_by_label("Key label").fill("deploy script")
    page.get_by_role("button", name="Create personal API key").click()
    shown = page.get_by_label("New personal API key")
    shown.wait_for()
    secret = shown.input_value()
    assert secret.startswith("phx_")
    api = f"{console_url}/api/projects/@current/feature_flags/"
    bearer = {"authorization": f"Bearer {secret}"}
    assert httpx.get(api, headers=bearer).status_code == 200
    created = httpx.post(api, headers=bearer, json={"key": "made-by-key"})
    assert created.status_code == 201  # an editor's key may create flags
    page.reload()
    row = page.get_by_role("row").filter(has_text="deploy script")
    assert secret[:8] in row.inner_text() and secret not in page.content()
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke key deploy script").click()
    page.wait_for_load_state("load")
    for _ in range(50):
        if httpx.get(api, headers=bearer).status_code == 401:
            break
        time.sleep(0.05)
    assert httpx.get(api, headers=bearer).status_code == 401
    assert "Revoked" in page.get_by_role("row").filter(has_text="deploy script").inner_text()


def test_viewer_sees_a_read_only_editor(page, console_url: str) -> None:  # type: ignore[no-untyped-def]
    _log_in(page, console_url, VIEWER_EMAIL)
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
    api = f"{console_url}/api/projects/1/feature_flags/"
    assert httpx.get(api, headers=bearer).status_code == 200
    refused = httpx.post(api, headers=bearer, json={"key": "viewer-flag"})
    assert refused.status_code == 403 and "viewers" in refused.json()["detail"]
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{console_url}/login")
