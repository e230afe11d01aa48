"""Surveys and early access features as visitors meet them: posthog-js in headless Chromium.

The page (on another origin) loads ``<api_host>/static/array.js`` and inits posthog-js with
Flagstaff as ``api_host``; posthog-js reads the remote config (``surveys: true`` once a survey
is active), loads its surveys bundle and the survey list from Flagstaff, and decides from the
flags which survey to show. Each visitor is a person the backend knew beforehand (their
properties sent through ``/batch/``), bootstrapped as the page's distinct id.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.drivers import run_driver
from tests.e2e.site import Site
from tests.e2e.state import ProjectState
from tests.server import PROJECT_TOKEN, Api, Server

pytestmark = pytest.mark.usefixtures("chromium")
ROOT = Path(__file__).resolve().parents[2]
SURVEYS = "/api/projects/@current/surveys/"
FEATURES = "/api/projects/@current/early_access_feature/"
ANSWER = "Flags that follow me around"


@pytest.fixture(scope="module", autouse=True)
def installed_bundles() -> None:
    """The setup script `make run` calls; a no-op once the pinned release is installed."""
    subprocess.run(["bash", str(ROOT / "scripts/install-posthog-js.sh")], check=True)


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>surveys</title></head><body>
<p>A page with a survey</p>
<script src="__HOST__/static/array.js"></script>
<script>
const settings = __SETTINGS__;
const done = (result) => { window.__result = result; window.__fixtureDone = true };
const fail = (message) => { window.__fixtureError = message };
try {
  posthog.init(settings.token, {
    api_host: settings.host,
    request_batching: false,
    opt_out_useragent_filter: true,
    bootstrap: { distinctID: settings.distinctId, isIdentifiedID: true },
    loaded: (ph) => {
      ph.on('eventCaptured', (e) => { if (e.event === 'survey sent') window.__sent = true });
      if (settings.feature) {
        ph.getEarlyAccessFeatures((features) => {
          ph.updateEarlyAccessFeatureEnrollment(settings.feature, settings.enroll);
          done({ features: features.map((f) => [f.flagKey, f.stage, f.name]) });
        }, true, ['beta']);
        return;
      }
      // getActiveMatchingSurveys drops its callback ("init was not called") until the surveys
      // bundle has loaded, which may come before or after the flags: wait for both.
      const flagsLoaded = new Promise((resolve) => ph.onFeatureFlags(resolve));
      const surveysLoaded = new Promise((resolve) => ph.onSurveysLoaded(resolve));
      Promise.all([flagsLoaded, surveysLoaded]).then(() => {
        const report = (surveys) => done({ matching: surveys.map((s) => s.id) });
        ph.getActiveMatchingSurveys(report, true);
      });
    },
  });
} catch (error) {
  fail(String(error));
}
</script></body></html>
"""


def _visit(server: Server, distinct_id: str, **options: Any) -> dict[str, Any]:
    """One visitor's page view(s); what the driver saw."""
    settings = {
        "token": PROJECT_TOKEN,
        "host": server.url,
        "distinctId": distinct_id,
        "feature": options.pop("feature", None),
        "enroll": options.pop("enroll", None),
    }
    page = PAGE.replace("__HOST__", server.url).replace("__SETTINGS__", json.dumps(settings))
    with Site() as site:
        url = site.add("/survey.html", page.encode())
        return run_driver("drive_surveys.mjs", {"pageUrl": url, **options}).raw


def _person(server: Server, distinct_id: str, **properties: Any) -> None:
    r = httpx.post(
        f"{server.url}/batch/",
        json={
            "api_key": PROJECT_TOKEN,
            "batch": [
                {"event": "$set", "distinct_id": distinct_id, "properties": {"$set": properties}}
            ],
        },
    )
    assert r.status_code == 200, r.text


def _until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _flags(server: Server, distinct_id: str) -> dict[str, Any]:
    r = httpx.post(
        f"{server.url}/flags/?v=2", json={"token": PROJECT_TOKEN, "distinct_id": distinct_id}
    )
    assert r.status_code == 200, r.text
    return {k: v.get("variant") or v["enabled"] for k, v in r.json()["flags"].items()}


def _popover(mgmt: Api, **fields: Any) -> dict[str, Any]:
    r = mgmt.post(
        SURVEYS,
        json={
            "name": f"Feedback {uuid.uuid4().hex[:6]}",
            "type": "popover",
            "start_date": "2024-01-01T00:00:00Z",
            "questions": [{"type": "open", "question": "What would you change?"}],
            **fields,
        },
    )
    assert r.status_code == 201, r.text
    return r.json()


def _config_says_surveys(server: Server) -> bool:
    return bool(
        _until(lambda: httpx.get(f"{server.url}/array/{PROJECT_TOKEN}/config").json()["surveys"])
    )


def test_a_targeted_popover_survey_is_shown_answered_and_counted(
    flagstaff: Server, mgmt: Api
) -> None:
    _person(flagstaff, "pro-visitor", plan="pro")
    _person(flagstaff, "free-visitor", plan="free")
    survey = _popover(
        mgmt,
        targeting_flag_filters={
            "groups": [{"properties": [{"key": "plan", "value": ["pro"], "type": "person"}]}]
        },
    )
    sid = survey["id"]
    assert _config_says_surveys(flagstaff)

    other = _visit(flagstaff, "free-visitor", surveyId=sid, watchMs=4000)
    assert sid not in other["result"]["matching"] and not other["shown"]

    seen = _visit(flagstaff, "pro-visitor", surveyId=sid, answer=ANSWER, reload=True)
    assert seen["result"]["matching"] == [sid] and seen["shown"]
    assert sid not in seen["resultAfterReload"]["matching"]
    assert not seen["shownAfterReload"]

    # the server knows the answer: the internal targeting flag is off for this person ...
    internal = survey["internal_targeting_flag"]["key"]
    assert _until(lambda: _flags(flagstaff, "pro-visitor").get(internal) is False)

    # ... and the answer is counted, in the stats and in the summary
    def sent() -> dict[str, Any] | None:
        stats = mgmt.get(f"{SURVEYS}{sid}/stats/").json()["stats"]
        return stats if stats["survey sent"]["total_count"] else None

    stats = _until(sent)
    assert stats is not None and stats["survey sent"]["total_count"] == 1
    assert stats["survey shown"]["unique_persons"] == 1
    summary = mgmt.get(f"{SURVEYS}{sid}/summary/").json()
    answers = summary["questions"][0]["open_answers"]["results"]
    assert [a["response"] for a in answers] == [ANSWER]


def test_a_survey_linked_to_a_variant_shows_only_for_that_variant(
    flagstaff: Server, mgmt: Api
) -> None:
    _person(flagstaff, "variant-test", cohort="early")
    _person(flagstaff, "variant-control", cohort="late")
    flag = mgmt.create_flag(
        key="checkout-redesign",
        filters={
            "groups": [
                {
                    "properties": [{"key": "cohort", "value": ["early"], "type": "person"}],
                    "rollout_percentage": 100,
                    "variant": "test",
                },
                {"properties": [], "rollout_percentage": 100, "variant": "control"},
            ],
            "multivariate": {
                "variants": [
                    {"key": "control", "rollout_percentage": 50},
                    {"key": "test", "rollout_percentage": 50},
                ]
            },
        },
    )
    survey = _popover(mgmt, linked_flag_id=flag["id"], conditions={"linkedFlagVariant": "test"})
    sid = survey["id"]
    assert _config_says_surveys(flagstaff)
    assert _flags(flagstaff, "variant-test")["checkout-redesign"] == "test"
    assert _flags(flagstaff, "variant-control")["checkout-redesign"] == "control"

    shown = _visit(flagstaff, "variant-test", surveyId=sid)
    assert shown["result"]["matching"] == [sid] and shown["shown"]
    hidden = _visit(flagstaff, "variant-control", surveyId=sid, watchMs=4000)
    assert hidden["result"]["matching"] == [] and not hidden["shown"]


def test_an_early_access_feature_is_listed_opted_into_and_out_of(
    flagstaff: Server, mgmt: Api
) -> None:
    r = mgmt.post(FEATURES, json={"name": "Dark Mode", "stage": "beta"})
    assert r.status_code == 201, r.text
    key = r.json()["feature_flag"]["key"]
    assert key == "dark-mode"
    mgmt.post(FEATURES, json={"name": "Time Travel", "stage": "alpha"})
    assert _until(lambda: _flags(flagstaff, "early-bird").get(key) is False)

    opted_in = _visit(flagstaff, "early-bird", feature=key, enroll=True)
    assert opted_in["result"]["features"] == [[key, "beta", "Dark Mode"]]
    assert _until(lambda: _flags(flagstaff, "early-bird")[key] is True)
    assert _flags(flagstaff, "someone-else")[key] is False

    _visit(flagstaff, "early-bird", feature=key, enroll=False)
    assert _until(lambda: _flags(flagstaff, "early-bird")[key] is False)


def test_the_surveys_example_page(flagstaff: Server, mgmt: Api) -> None:
    """examples/web/surveys.html, as a reader opens it: the survey pops up, the beta feature is
    listed, and ticking it opts the visitor in."""
    page = (ROOT / "examples" / "web" / "surveys.html").read_bytes()
    assert len(page.decode().splitlines()) < 40
    assert mgmt.post(FEATURES, json={"name": "Dark Mode", "stage": "beta"}).status_code == 201
    survey = _popover(mgmt)
    assert _config_says_surveys(flagstaff)
    with Site() as site:
        url = site.add("/surveys.html", page)
        report = run_driver(
            "e2e_browser_sdk.mjs",
            {
                "pageUrl": f"{url}?token={PROJECT_TOKEN}&host={flagstaff.url}",
                "apiOrigin": flagstaff.url,
                "readyWhen": "document.querySelector('#dark-mode') !== null && "
                f"document.querySelector('.PostHogSurvey-{survey['id']}') !== null",
                "click": "#dark-mode",
                "collect": "document.getElementById('features').textContent",
            },
        )
    assert report.raw["problems"] == []
    assert "Dark Mode (dark-mode)" in report.raw["results"]
    state = ProjectState.read(mgmt)
    visitor = state.only("survey shown")["distinct_id"]
    assert state.only("survey shown")["properties"]["$survey_id"] == survey["id"]
    assert _until(lambda: _flags(flagstaff, visitor)["dark-mode"] is True)
    assert _flags(flagstaff, "someone-else")["dark-mode"] is False
