"""The console's usage journeys in a real browser, on the editor journeys' server and browser
(``test_console_editor.py``): after ``$feature_flag_called`` events the flags list shows the
checks, the flag's page charts them (an SVG with its title), and the filter builder offers the
values persons really have."""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from flagstaff.common.units import DAY_MS
from tests.e2e.test_console_editor import (  # noqa: F401  (fixtures)
    EDITOR_EMAIL,
    VIEWER_EMAIL,
    Seeded,
    _log_in,
    browser,
    console,
    page,
    sync_api,
)
from tests.server import PROJECT_TOKEN


def _send(seeded: Seeded, batch: list[dict[str, Any]]) -> None:
    sent = httpx.post(f"{seeded.url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
    assert sent.status_code == 200, sent.text


def _check(key: str, response: Any, ms: int) -> dict[str, Any]:
    return {
        "event": "$feature_flag_called",
        "distinct_id": f"visitor-{uuid.uuid4().hex[:6]}",
        "uuid": str(uuid.uuid4()),
        "timestamp": datetime.fromtimestamp(ms / 1000, UTC).isoformat(),
        "properties": {"$feature_flag": key, "$feature_flag_response": response},
    }


def _journey(request: pytest.FixtureRequest) -> tuple[Any, Seeded]:
    """The editor journeys' browser page and seeded server (their fixtures, by name)."""
    return request.getfixturevalue("page"), request.getfixturevalue("console")


def test_checks_show_in_the_list_and_as_charts(request: pytest.FixtureRequest) -> None:
    tab, seeded = _journey(request)
    variants = [
        {"key": "control", "rollout_percentage": 50},
        {"key": "wide", "rollout_percentage": 50},
    ]
    made = seeded.api.post(
        "/api/projects/@current/feature_flags/",
        json={
            "key": "layout-test",
            "filters": {
                "groups": [{"rollout_percentage": 100}],
                "multivariate": {"variants": variants},
            },
        },
    ).json()
    now = int(time.time() * 1000)
    _send(
        seeded,
        [_check("layout-test", "control", now - 60_000) for _ in range(9)]
        + [_check("layout-test", "wide", now - DAY_MS) for _ in range(21)],
    )
    _log_in(tab, seeded.url, VIEWER_EMAIL)
    row = tab.get_by_role("row").filter(has=tab.get_by_role("link", name="layout-test"))
    cell = row.get_by_role("cell").nth(5)
    assert cell.inner_text().strip() == "1.0"  # 30 checks over 30 days
    spark = cell.get_by_role("img", name="Checks of layout-test per day")
    assert spark.count() == 1
    assert "30 checks in the last 30 days" in str(spark.locator("desc").text_content())

    tab.get_by_role("link", name="layout-test").click()
    tab.wait_for_url(f"{seeded.url}/feature_flags/{made['id']}")
    timeline = tab.get_by_role("img", name="Checks of layout-test per day, last 30 days")
    assert timeline.is_visible()
    desc = str(timeline.locator("desc").text_content())
    assert re.search(r"^30 checks from \d{4}-\d\d-\d\d to \d{4}-\d\d-\d\d \(UTC\): ", desc)
    assert "control 9; wide 21." in desc
    split = tab.get_by_role("img", name="Share of checks of layout-test per value, last 30 days")
    assert split.is_visible()
    assert split.locator("desc").text_content() == "wide 70.0% (21); control 30.0% (9)."
    assert tab.get_by_text("30 checks in the last 30 days; last checked").is_visible()
    tab.get_by_text("Checks per day as a table").click()
    numbers = tab.get_by_role("table", name="Checks per day and value, last 30 days")
    assert numbers.get_by_role("row").count() == 3  # a header and two days


def test_the_builder_suggests_values_persons_have(request: pytest.FixtureRequest) -> None:
    tab, seeded = _journey(request)
    _send(
        seeded,
        [
            {"event": "$set", "distinct_id": f"buyer-{i}", "$set": {"tier": tier}}
            for i, tier in enumerate(["gold"] * 3 + ["silver"] * 2 + ["bronze"])
        ],
    )
    _log_in(tab, seeded.url, EDITOR_EMAIL)
    tab.get_by_role("link", name="New feature flag").click()
    first = tab.get_by_role("group", name="Condition set 1")
    first.get_by_role("button", name="Add filter to condition set 1").click()
    tier = first.get_by_role("group", name="Filter 1")
    tier.get_by_label("Property name").fill("tier")
    seen = tier.get_by_label("Values seen (choose one to use it)")
    seen.focus()
    options = tier.locator("datalist option")
    sync_api.expect(options).to_have_count(3)
    assert [options.nth(i).get_attribute("value") for i in range(3)] == [
        "gold",
        "silver",
        "bronze",
    ]
    assert options.nth(0).get_attribute("label") == "gold (3)"
    seen.fill("silver")
    seen.press("Enter")
    value = tier.get_by_label("Value (one per line for a list)")
    sync_api.expect(value).to_have_value("silver")
    seen.fill("gold")
    seen.press("Tab")
    sync_api.expect(value).to_have_value("silver\ngold")  # "equals" takes a list: a new line
    assert seen.input_value() == ""
    # the cohort builder's filters offer them too
    tab.goto(f"{seeded.url}/cohorts/new")
    first = tab.get_by_role("group", name="Condition set 1")
    first.get_by_role("button", name="Add filter to condition set 1").click()
    tier = first.get_by_role("group", name="Filter 1")
    tier.get_by_label("Property name").fill("tier")
    seen = tier.get_by_label("Values seen (choose one to use it)")
    seen.focus()
    sync_api.expect(tier.locator("datalist option")).to_have_count(3)
    seen.fill("bronze")
    seen.press("Enter")
    sync_api.expect(tier.get_by_label("Value (one per line for a list)")).to_have_value("bronze")
