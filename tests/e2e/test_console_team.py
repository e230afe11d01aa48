"""The team pages' journeys in a real browser (Playwright, Debian's Chromium) against the real
server, SQLite or PostgreSQL by ``FLAGSTAFF_TEST_BACKEND``: an admin adds a viewer, uploads a
static cohort as a CSV file and targets it from a flag that ``/flags`` then answers; the viewer
sees the cohorts but is offered no change and is refused one; a dynamic cohort built in the
builder; groups, warnings, settings and the events chart."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.test_console_editor import CHROMIUM, CHROMIUM_ARGS, Seeded, _log_in
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Server

ADMIN_EMAIL = "admin@example.com"
VIEWER_EMAIL = "new.viewer@example.com"
PASSWORD = "correct horse battery"
P = "/api/projects/@current"

sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    server = Server(
        tmp_path_factory.mktemp("team-console") / "data",
        env={"FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN_EMAIL, "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD},
    ).start()
    try:
        batch = [
            {"event": "$identify", "distinct_id": name, "properties": {"$set": {"plan": plan}}}
            for name, plan in (("ann", "pro"), ("bob", "free"), ("cat", "pro"))
        ]
        batch.append(
            {"event": "$groupidentify", "distinct_id": "ann", "properties": {
                "$group_type": "company", "$group_key": "acme", "$group_set": {"seats": 12}}}
        )  # fmt: skip
        batch.append({"event": "", "distinct_id": "nameless"})  # an ingestion warning
        sent = httpx.post(f"{server.url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
        assert sent.status_code == 200
        yield Seeded(server, {})
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        yield page
    finally:
        context.close()
    assert not errors, errors


def _enabled(console: Seeded, key: str, distinct_id: str) -> bool | None:
    flag = console.flags_for(distinct_id).get(key)
    return None if flag is None else bool(flag["enabled"])


def _eventually(check: Any, expected: Any) -> Any:
    """The workers' definitions follow within 0.2 s; poll a little."""
    for _ in range(50):
        value = check()
        if value == expected:
            return value
        time.sleep(0.1)
    return check()


def test_admin_adds_a_viewer_uploads_a_static_cohort_and_targets_it(
    page: Any, console: Seeded
) -> None:
    _log_in(page, console.url, ADMIN_EMAIL)

    # a viewer, created with an initial password
    page.get_by_role("link", name="Members").click()
    adding = page.get_by_role("region", name="Add a member")
    adding.get_by_label("Email").fill(VIEWER_EMAIL)
    adding.get_by_label("Role").select_option("viewer")
    adding.get_by_label("Initial password").fill(PASSWORD)
    adding.get_by_role("button", name="Add member").click()
    row = page.get_by_role("row").filter(has_text=VIEWER_EMAIL)
    row.wait_for()
    assert row.get_by_label(f"Role of {VIEWER_EMAIL}").input_value() == "viewer"
    # the only admin is not offered removal; the new member is
    assert page.get_by_role("button", name=f"Remove {ADMIN_EMAIL}").count() == 0
    assert page.get_by_role("button", name=f"Remove {VIEWER_EMAIL}").is_visible()

    # a static cohort from a CSV file
    page.get_by_role("link", name="Cohorts", exact=True).click()
    page.get_by_role("link", name="New cohort").click()
    page.get_by_label("Name of the static cohort").fill("Beta list")
    page.get_by_label("CSV file of distinct ids").set_input_files(
        files=[{"name": "beta.csv", "mimeType": "text/csv", "buffer": b"distinct_id\nann\nbob\n"}]
    )
    page.get_by_role("button", name="Upload CSV and create static cohort").click()
    page.wait_for_url(re.compile(r".*/cohorts/\d+$"))
    assert "Persons: 2" in page.locator("main").inner_text()
    table = page.get_by_role("table", name="First distinct ids, in order")
    assert table.get_by_role("cell", name="ann", exact=True).is_visible()

    # more ids from a second file
    page.get_by_label("CSV file of distinct ids").set_input_files(
        files=[{"name": "more.csv", "mimeType": "text/csv", "buffer": b"dan\n"}]
    )
    page.get_by_role("button", name="Upload CSV and add its distinct ids").click()
    page.get_by_text("Persons: 3").wait_for()

    # a flag targeting it, made in the flag editor
    page.get_by_role("link", name="Feature flags").click()
    page.get_by_role("link", name="New feature flag").click()
    page.get_by_label("Key", exact=True).fill("beta-only")
    first = page.get_by_role("group", name="Condition set 1")
    first.get_by_role("button", name="Add filter to condition set 1").click()
    cohort = first.get_by_role("group", name="Filter 1")
    cohort.get_by_label("Filter type").select_option("cohort")
    cohort.get_by_label(re.compile("^Cohort")).select_option(label="Beta list")
    first.get_by_label("Rollout percentage").fill("100")
    page.get_by_role("button", name="Create feature flag").click()
    page.wait_for_url(re.compile(r".*/feature_flags/\d+$"))
    assert _eventually(lambda: _enabled(console, "beta-only", "ann"), True) is True
    assert _enabled(console, "beta-only", "dan") is True  # no events yet: listed anyway
    assert _enabled(console, "beta-only", "cat") is False


def test_the_viewer_sees_cohorts_but_cannot_change_them(page: Any, console: Seeded) -> None:
    _log_in(page, console.url, VIEWER_EMAIL)
    page.get_by_role("link", name="Cohorts", exact=True).click()
    assert page.get_by_role("link", name="Beta list").is_visible()
    assert page.get_by_role("link", name="New cohort").count() == 0
    page.get_by_role("link", name="Beta list").click()
    assert "read-only" in page.locator("main").inner_text()
    for name in ("Upload CSV", "Save cohort", "Delete cohort"):
        assert page.get_by_role("button", name=re.compile(name)).count() == 0
    assert page.get_by_label("Name", exact=True).is_disabled()
    cohort_id = page.url.rsplit("/", 1)[1]
    # the API refuses the viewer's session too
    status = page.evaluate(
        """async (id) => {
            try {
                await window.flagstaff.api("PATCH", `/api/projects/@current/cohorts/${id}/`,
                                           {name: "mine"});
                return 200;
            } catch (error) { return error.status; }
        }""",
        cohort_id,
    )
    assert status == 403
    assert page.goto(f"{console.url}/cohorts/new").status == 403
    page.goto(f"{console.url}/members")
    assert page.get_by_role("button", name="Add member").count() == 0
    assert page.get_by_role("cell", name=ADMIN_EMAIL).is_visible()


def test_a_dynamic_cohort_from_the_builder(page: Any, console: Seeded) -> None:
    _log_in(page, console.url, ADMIN_EMAIL)
    page.goto(f"{console.url}/cohorts/new")
    page.get_by_label("Name", exact=True).fill("Pro plan")
    first = page.get_by_role("group", name="Condition set 1")
    first.get_by_role("button", name="Add filter to condition set 1").click()
    plan = first.get_by_role("group", name="Filter 1")
    assert plan.get_by_label("Filter type").locator("option").all_inner_texts() == [
        "Person property",
        "Cohort",
    ]
    plan.get_by_label("Property name").fill("plan")
    plan.get_by_label("Value (one per line for a list)").fill("pro")
    page.get_by_role("button", name="Create cohort").click()
    page.wait_for_url(re.compile(r".*/cohorts/\d+$"))
    assert "Persons: 2" in page.locator("main").inner_text()  # ann and cat
    api = httpx.Client(base_url=console.url, headers={"Authorization": f"Bearer {PERSONAL_KEY}"})
    made = api.get(f"{P}/cohorts/{page.url.rsplit('/', 1)[1]}/").json()
    assert made["filters"]["properties"] == {
        "type": "OR",
        "values": [
            {
                "type": "AND",
                "values": [
                    {"key": "plan", "type": "person", "operator": "exact", "value": ["pro"]}
                ],
            }
        ],
    }
    page.get_by_role("link", name="Cohorts", exact=True).click()
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name="Pro plan"))
    assert row.get_by_role("cell").nth(2).inner_text() == "2"


def test_groups_warnings_settings_and_the_events_chart(page: Any, console: Seeded) -> None:
    _log_in(page, console.url, ADMIN_EMAIL)
    console.api.post(
        f"{P}/feature_flags/",
        json={
            "key": "big-companies",
            "filters": {
                "aggregation_group_type_index": 0,
                "groups": [
                    {
                        "properties": [{"key": "seats", "type": "group", "group_type_index": 0,
                                        "operator": "gt", "value": 10}],
                        "rollout_percentage": 100,
                    }
                ],
            },
        },
    )  # fmt: skip
    page.get_by_role("link", name="Groups").click()
    page.get_by_label("Group key contains").fill("AC")
    page.get_by_role("button", name="Search company groups").click()
    page.get_by_role("link", name="acme").click()
    flags = page.get_by_role("table", name=re.compile("Feature flags matched by company"))
    assert "enabled" in flags.get_by_role("row").filter(has_text="big-companies").inner_text()

    page.get_by_role("link", name="Ingestion warnings").click()
    warnings = page.get_by_role("table", name="Warnings, newest first")
    assert "Event without a name" in warnings.inner_text()

    page.get_by_role("link", name="Project settings").click()
    assert page.get_by_label("Project token (public)").input_value() == PROJECT_TOKEN
    page.get_by_role("button", name="Copy project token").click()
    page.get_by_label("Project name").fill("Shop")
    with page.expect_navigation():  # the console reloads the page once the API answered
        page.get_by_role("button", name="Rename project").click()
    assert _eventually(lambda: console.api.get(f"{P}/").json()["name"], "Shop") == "Shop"
    # Event retention: asked to confirm (the page fixture accepts), then set through the
    # management API, and the page reloaded to show it.
    page.get_by_label("Keep events for (days, empty: forever)").fill("45")
    with page.expect_navigation():
        page.get_by_role("button", name="Save retention").click()
    days = lambda: console.api.get(f"{P}/").json()["event_retention_days"]  # noqa: E731
    assert _eventually(days, 45) == 45
    assert "older than 45 days are deleted" in page.locator("[data-retention-now]").inner_text()
    page.get_by_label("Keep events for (days, empty: forever)").fill("")
    with page.expect_navigation():
        page.get_by_role("button", name="Save retention").click()
    assert _eventually(days, None) is None
    usage = page.get_by_role("table", name="Usage and quotas")
    assert "Events stored" in usage.inner_text()

    page.get_by_role("link", name="Live events").click()
    chart = page.get_by_role("img", name=re.compile("Events per minute"))
    assert chart.is_visible()
    assert "events in the last 60 minutes" in page.locator("figure.chart figcaption").inner_text()
