"""Surveys and early access features in the console, in a real browser against the real server
(SQLite or PostgreSQL by ``FLAGSTAFF_TEST_BACKEND``): a survey built in the console (questions
added, reordered and removed, the preview drawn by posthog-js's own bundle), answered by a
visitor in a posthog-js page, the answer on the survey page; an early access feature made in
the console, opted into with posthog-js, the enrolled count going up, then moved to general
availability."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.test_console_editor import (
    ADMIN_EMAIL,
    EDITOR_EMAIL,
    PASSWORD,
    VIEWER_EMAIL,
    _cli,
    _log_in,
    browser,
    page,
)
from tests.e2e.test_console_experiments import screenshot
from tests.e2e.test_surveys_browser import _person, _until, _visit
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Server

__all__ = ["browser", "page"]
pytestmark = pytest.mark.usefixtures("chromium")

P = "/api/projects/@current"
ANSWER = "Let me export the answers"


class Seeded:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.url = server.url
        self.api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {PERSONAL_KEY}"}, timeout=30
        )


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    server = Server(
        tmp_path_factory.mktemp("products-console") / "data",
        env={"FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN_EMAIL, "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD},
    ).start()
    try:
        for email, role in ((EDITOR_EMAIL, "editor"), (VIEWER_EMAIL, "viewer")):
            _cli(server, "user", "create", "--email", email, "--password", PASSWORD, "--role", role)
        yield Seeded(server)
    finally:
        server.stop()


def _flags(seeded: Seeded, distinct_id: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{seeded.url}/flags?v=2", json={"api_key": PROJECT_TOKEN, "distinct_id": distinct_id}
    )
    return {k: v.get("variant") or v["enabled"] for k, v in answer.json()["flags"].items()}


def test_a_survey_built_in_the_console_is_answered_and_read(page: Any, seeded: Seeded) -> None:
    url = seeded.url
    _person(seeded.server, "pro-visitor", plan="pro")
    _log_in(page, url, EDITOR_EMAIL)
    page.get_by_role("link", name="Surveys").click()
    page.wait_for_url(f"{url}/surveys")
    page.get_by_text("No surveys yet.").wait_for()
    page.get_by_role("link", name="New survey").click()
    page.wait_for_url(f"{url}/surveys/new")
    page.get_by_label("Name", exact=True).fill("Console feedback")
    page.get_by_label("Question 1 text").fill("What would you change?")
    preview = page.frame_locator("[data-survey-preview]")
    preview.get_by_text("What would you change?").wait_for()

    page.get_by_role("button", name="Add question").click()
    page.get_by_label("Question 2 type").select_option("rating10")
    page.get_by_label("Question 2 text").fill("How likely are you to recommend us?")
    page.locator("[data-question]").nth(1).get_by_role("button", name="Move question up").click()
    assert (
        page.get_by_label("Question 1 text").input_value() == "How likely are you to recommend us?"
    )
    preview.get_by_text("How likely are you to recommend us?").wait_for()  # drawn by posthog-js
    screenshot(page, "console-survey-builder")
    page.locator("[data-question]").nth(0).get_by_role("button", name="Remove question").click()
    assert page.get_by_label("Question 1 text").input_value() == "What would you change?"
    assert page.locator("[data-question]").count() == 1

    page.get_by_label("Survey type").select_option("popover")
    page.get_by_role("button", name="Add person property condition").click()
    page.get_by_label("Condition 1 person property").fill("plan")
    page.get_by_label("Condition 1 value").fill("pro")
    page.get_by_label("Wait period (days since the person last saw a survey)").fill("0")
    page.get_by_label("Stop after this many responses").fill("100")
    page.get_by_label("Launch on save").check()
    page.get_by_role("button", name="Create survey").click()
    page.wait_for_url(re.compile(r".*/surveys/[0-9a-f-]{36}$"))
    survey_id = page.url.rsplit("/", 1)[1]
    stored = seeded.api.get(f"{P}/surveys/{survey_id}/").json()
    assert stored["type"] == "popover" and stored["start_date"] is not None
    assert stored["responses_limit"] == 100
    assert [q["type"] for q in stored["questions"]] == ["open"]
    properties = stored["targeting_flag"]["filters"]["groups"][0]["properties"]
    assert [(p["key"], p["value"]) for p in properties] == [("plan", "pro")]

    seen = _visit(seeded.server, "pro-visitor", surveyId=survey_id, answer=ANSWER)
    assert seen["shown"], seen

    def answered() -> bool:
        page.reload()
        return page.locator("[data-open-answers]").count() == 1

    assert _until(answered, timeout=15)
    assert ANSWER in page.locator("[data-open-answers]").inner_text()
    sent = page.locator('[data-counter="sent"]').inner_text()
    assert re.search(r"Sent\s+1\s+1\s+100% of shown", sent), sent
    stats = seeded.api.get(f"{P}/surveys/{survey_id}/stats/").json()
    assert stats["stats"]["survey sent"]["total_count"] == 1
    screenshot(page, "console-survey")

    page.get_by_role("link", name="Edit survey").click()
    page.wait_for_url(f"{url}/surveys/{survey_id}/edit")
    assert page.get_by_label("Question 1 text").input_value() == "What would you change?"
    assert page.get_by_label("Condition 1 person property").input_value() == "plan"
    page.get_by_label("End (UTC)").fill("2099-01-31T12:00")
    page.get_by_role("button", name="Save survey").click()
    page.wait_for_url(f"{url}/surveys/{survey_id}")
    page.get_by_text("2099-01-31 12:00 UTC").wait_for()
    edited = seeded.api.get(f"{P}/surveys/{survey_id}/").json()
    assert edited["end_date"] == "2099-01-31T12:00:00Z"
    assert edited["start_date"] == stored["start_date"]  # left as it was
    assert edited["questions"][0]["id"] == stored["questions"][0]["id"]

    page.get_by_role("button", name="Stop survey").click()
    page.locator("[data-status]", has_text="complete").wait_for()
    page.get_by_role("button", name="Duplicate survey").click()
    page.get_by_role("heading", name=re.compile(r"Console feedback \(copy\)")).wait_for()
    assert page.locator("[data-status]").inner_text() == "draft"
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Archive survey").click()
    page.locator("[data-status]", has_text="archived").wait_for()
    page.goto(f"{url}/surveys")
    listed = page.locator(f'tr[data-survey="{survey_id}"]').inner_text()
    assert "complete" in listed and "1" in listed
    screenshot(page, "console-surveys")


def test_rating_and_choice_answers_are_charted(page: Any, seeded: Seeded) -> None:
    made = seeded.api.post(
        f"{P}/surveys/",
        json={
            "name": "Charted",
            "type": "api",
            "start_date": "2024-01-01T00:00:00Z",
            "questions": [
                {"type": "rating", "scale": 10, "question": "Recommend us?"},
                {"type": "single_choice", "question": "Plan?", "choices": ["Free", "Pro"]},
            ],
        },
    ).json()
    q_nps, q_plan = (q["id"] for q in made["questions"])
    answers = [(10, "Pro"), (9, "Pro"), (3, "Free"), (8, "Free")]
    batch = [
        {
            "event": "survey sent",
            "distinct_id": f"rater-{n}",
            "properties": {
                "$survey_id": made["id"],
                f"$survey_response_{q_nps}": score,
                f"$survey_response_{q_plan}": plan,
            },
        }
        for n, (score, plan) in enumerate(answers)
    ]
    r = httpx.post(f"{seeded.url}/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
    assert r.status_code == 200, r.text
    summary_url = f"{P}/surveys/{made['id']}/summary/"
    _until(lambda: seeded.api.get(summary_url).json()["responses"] == 4)
    summary = seeded.api.get(summary_url).json()["questions"]
    _log_in(page, seeded.url, VIEWER_EMAIL)
    page.goto(f"{seeded.url}/surveys/{made['id']}")
    nps = page.locator('[data-question-result="0"]')
    assert nps.locator("[data-figure]").inner_text() == f"NPS {summary[0]['nps']:g} · average 7.5"
    assert nps.locator("svg").count() == 2  # the distribution and the NPS groups
    assert "Promoters (9-10): 2" in (nps.locator("svg").nth(1).text_content() or "")
    plan = page.locator('[data-question-result="1"] svg')
    assert "Free: 2, Pro: 2" in (plan.text_content() or "")
    assert page.get_by_role("button", name="Launch survey").count() == 0  # a viewer
    assert page.get_by_role("link", name="Edit survey").count() == 0
    for path in ("/surveys/new", f"/surveys/{made['id']}/edit", "/early_access/new"):
        page.goto(f"{seeded.url}{path}")
        assert page.get_by_role("heading", name="No access").is_visible(), path
    page.goto(f"{seeded.url}/early_access")
    assert page.get_by_role("link", name="New early access feature").count() == 0


def test_an_early_access_feature_gets_enrolled_persons(page: Any, seeded: Seeded) -> None:
    url = seeded.url
    _log_in(page, url, EDITOR_EMAIL)
    page.get_by_role("link", name="Early access").click()
    page.wait_for_url(f"{url}/early_access")
    page.get_by_role("link", name="New early access feature").click()
    page.get_by_label("Name", exact=True).fill("Dark Mode")
    page.get_by_label("Description").fill("Easier on the eyes at night")
    page.get_by_label("Stage").select_option("beta")
    page.get_by_label("Documentation URL").fill("https://example.com/docs/dark-mode")
    page.get_by_role("button", name="Create early access feature").click()
    page.wait_for_url(re.compile(r".*/early_access/[0-9a-f-]{36}$"))
    assert page.locator("[data-enrolled-count]").inner_text() == "0"
    feature_id = page.url.rsplit("/", 1)[1]
    stored = seeded.api.get(f"{P}/early_access_feature/{feature_id}/").json()
    key = stored["feature_flag"]["key"]
    assert key == "dark-mode" and stored["stage"] == "beta"

    opted_in = _visit(seeded.server, "early-bird", feature=key, enroll=True)
    assert opted_in["result"]["features"] == [[key, "beta", "Dark Mode"]]

    def enrolled() -> bool:
        page.reload()
        return page.locator("[data-enrolled-count]").inner_text() == "1"

    assert _until(enrolled, timeout=15)
    assert page.locator("[data-enrolled]").inner_text().strip() == "early-bird"
    screenshot(page, "console-early-access")
    page.goto(f"{url}/early_access")
    row = page.locator(f'tr[data-feature="{feature_id}"]')
    assert "Beta" in row.inner_text() and key in row.inner_text()
    assert row.locator("[data-enrolled-count]").inner_text() == "1"
    screenshot(page, "console-early-access-list")

    # opting out (posthog-js sets the property false) takes the person off both pages
    _visit(seeded.server, "early-bird", feature=key, enroll=False)

    def listed(count: str) -> bool:
        page.reload()
        return row.locator("[data-enrolled-count]").inner_text() == count

    assert _until(lambda: listed("0"), timeout=15)
    page.goto(f"{url}/early_access/{feature_id}")
    assert page.locator("[data-enrolled-count]").inner_text() == "0"
    assert page.locator("[data-enrolled]").count() == 0
    _visit(seeded.server, "early-bird", feature=key, enroll=True)  # and back in
    assert _until(enrolled, timeout=15)

    assert _flags(seeded, "someone-else")[key] is False
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Move to general availability").click()
    page.locator("[data-stage]", has_text="General availability").wait_for()
    assert _until(lambda: _flags(seeded, "someone-else")[key] is True)
