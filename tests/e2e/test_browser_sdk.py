"""posthog-js (``dist/array.full.js``) in headless Chromium, on a page served from another origin.

One visitor's journey per transport: the page loads the remote config, sends a pageview, the
visitor clicks a button (autocapture), reads flags and payloads anonymously, identifies (a flag
targeting a property set on identify turns on without a reload), joins a company (a group flag
turns on), answers a survey and leaves (``$pageleave`` by sendBeacon). Then everything the
project holds is checked.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import httpx
import pytest
from posthog import Posthog

from tests.e2e.deps import ARRAY_JS, NODE_MODULES
from tests.e2e.drivers import DriverReport, await_event, run_driver
from tests.e2e.flagset import (
    BANNER_PAYLOAD,
    CLIENT_SIDE_KEYS,
    PRO_PAYLOAD,
    VARIANT_PAYLOADS,
    create_flags,
)
from tests.e2e.site import Site, journey_page
from tests.e2e.state import ProjectState, group
from tests.e2e.traffic import SdkRequest
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Api, Server

pytestmark = pytest.mark.usefixtures("chromium")

USER = "user-js"
EMAIL = "ada@example.com"
SURVEY = "survey-nps-1"
JS_VERSION = json.loads((NODE_MODULES / "posthog-js" / "package.json").read_text())["version"]
# A backend registered the company before the visitor came (group flags need the group type).
BACKEND_ACME = {"name": "Acme Inc", "seats": 10}
BROWSER_ACME = {"name": "Acme Inc", "subscription": "enterprise"}
# Bucketed by posthog-js's $device_id: the variant survives identify without a person
# existing beforehand (experience continuity cannot promise that with identified-only
# person profiles, on PostHog as here).
DEVICE_FLAG = "device-variant"
DEVICE_FLAG_FILTERS = {
    "groups": [{"properties": [], "rollout_percentage": 100}],
    "multivariate": {
        "variants": [{"key": f"v{n}", "name": f"V{n}", "rollout_percentage": 20} for n in range(5)]
    },
}

# transport -> (posthog-js init options, driver options)
TRANSPORTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # The default: gzip bodies sent as text/plain, no hint in the query or headers.
    "gzip": ({}, {}),
    # A remote config offering only base64: form bodies `data=<base64>`.
    "base64": ({}, {"supportedCompression": ["base64"]}),
    # Uncompressed JSON; config.js fails to load, so posthog-js falls back to the JSON config.
    "json": ({"disable_compression": True}, {"block": ["**/array/*/config.js"]}),
}


def _flag_oracle(server: Server) -> Posthog:
    """posthog-python's local evaluator, an independent check of what the browser was served."""
    oracle = Posthog(PROJECT_TOKEN, host=server.url, secret_key=PERSONAL_KEY, send=False)
    oracle.load_feature_flags()
    return oracle


def _expected_variants(oracle: Posthog, distinct_id: str, **inputs: Any) -> dict[str, Any]:
    """What posthog-js's onFeatureFlags reports: the enabled client-side flags and values."""
    values = oracle.get_all_flags(distinct_id, only_evaluate_locally=True, **inputs) or {}
    wanted = {*CLIENT_SIDE_KEYS, DEVICE_FLAG}
    return {k: v for k, v in values.items() if v and k in wanted}


def _run_journey(server: Server, transport: str) -> tuple[DriverReport, str]:
    options, driver_options = TRANSPORTS[transport]
    with Site() as site:
        site.add("/array.full.js", ARRAY_JS.read_bytes(), "application/javascript")
        page_url = site.add(
            "/journey.html",
            journey_page(
                {
                    "token": PROJECT_TOKEN,
                    "apiHost": server.url,
                    "options": options,
                    "userId": USER,
                    "email": EMAIL,
                    "groupKey": "acme",
                    "surveyId": SURVEY,
                }
            ),
        )
        spec = {
            "pageUrl": page_url,
            "apiOrigin": server.url,
            "readyWhen": "window.__e2e.ready === true",
            "click": "#buy",
            "collect": "window.__e2e.journey()",
            # the $pageleave that posthog-js sends by sendBeacon as the page closes
            "awaitAfterLeave": await_event(server.url, event="$pageleave", distinct_id=USER),
            **driver_options,
        }
        return run_driver("e2e_browser_sdk.mjs", spec), page_url


def _check_transport(transport: str, report: DriverReport, site_origin: str) -> None:
    requests = report.requests
    assert requests, "the browser sent nothing"
    for r in requests:
        assert r.status == 200, (r.method, r.path, r.status)
        assert r.headers.get("origin") == site_origin, r
        assert r.response_headers.get("access-control-allow-origin") == site_origin, r
        assert r.response_headers.get("access-control-allow-credentials") == "true", r
    # The remote config: config.js as a script, or (when that fails) the JSON config.
    configs = [r for r in requests if r.path.startswith("/array/")]
    expected_type = "application/json" if transport == "json" else "application/javascript"
    suffix = "" if transport == "json" else ".js"
    assert [r.path for r in configs] == [f"/array/{PROJECT_TOKEN}/config{suffix}"]
    assert configs[0].response_headers["content-type"].startswith(expected_type)
    posts = [r for r in requests if r.method == "POST"]
    assert {r.route for r in posts} == {"/e", "/flags"}, posts
    encodings = Counter(r.encoding() for r in posts)
    if transport == "gzip":
        assert set(encodings) == {"gzip"}
        assert all(r.headers["content-type"] == "text/plain" for r in posts)
        assert all("compression" not in r.query for r in posts)
    elif transport == "json":
        assert set(encodings) == {"json"}
        assert all(r.headers["content-type"] == "application/json" for r in posts)
    else:
        # Requests sent before the remote config arrives are gzipped.
        assert set(encodings) <= {"base64-form", "gzip"} and encodings["base64-form"] >= 3
        for r in posts:
            if r.encoding() == "base64-form":
                assert r.query["compression"] == "base64"
                assert r.headers["content-type"] == "application/x-www-form-urlencoded"


def _sent_event_names(requests: list[SdkRequest]) -> Counter[str]:
    return Counter(name for r in requests if r.route == "/e" for name in r.event_names())


def _register_company_from_backend(server: Server) -> None:
    backend = httpx.post(
        f"{server.url}/i/v0/e/",
        json={
            "api_key": PROJECT_TOKEN,
            "event": "$groupidentify",
            "distinct_id": "backend",
            "properties": {
                "$group_type": "company",
                "$group_key": "acme",
                "$group_set": BACKEND_ACME,
            },
        },
    )
    assert backend.status_code == 200, backend.text


def _check_flags(server: Server, results: dict[str, Any]) -> str:
    """Flags as the page saw them, against posthog-python's local evaluation; the variant."""
    anon = results["anonId"]
    oracle = _flag_oracle(server)
    try:
        expected_anon = _expected_variants(
            oracle, anon, person_properties={"plan": "free"}, device_id=anon
        )
        expected_user = _expected_variants(
            oracle, USER, person_properties={"plan": "pro"}, device_id=anon
        )
        expected_grouped = _expected_variants(
            oracle,
            USER,
            device_id=anon,
            person_properties={"plan": "pro"},
            groups={"company": "acme"},
            group_properties={"company": BROWSER_ACME},
        )
    finally:
        oracle.shutdown()
    assert "pro-feature" not in expected_anon and expected_user["pro-feature"] is True
    device_variant = expected_anon[DEVICE_FLAG]
    assert expected_user[DEVICE_FLAG] == device_variant
    assert expected_grouped == {**expected_user, "company-beta": True}
    assert results["anonymous"] == {
        "pro": False,
        "banner": True,
        "bannerPayload": BANNER_PAYLOAD,
        "clientOnly": True,
        "device": device_variant,
        "callbacks": 1,
    }, "server-only flags must not reach the browser"
    variant = expected_user["checkout-variant"]
    assert results["identified"] == {
        "distinctId": USER,
        "pro": True,
        "proPayload": PRO_PAYLOAD,
        "variant": variant,
        "variantPayload": VARIANT_PAYLOADS[variant],
        "device": device_variant,
        "callbacks": results["identified"]["callbacks"],
    }
    assert results["grouped"] == {"company": True}
    # onFeatureFlags: the anonymous flags first, then identify's, then the group's, no reload.
    callbacks = results["flagCallbacks"]
    assert callbacks[0]["variants"] == expected_anon
    seen = [c["variants"] for c in callbacks]
    assert seen.index(expected_user) < seen.index(expected_grouped), seen
    assert all(v in (expected_anon, expected_user, expected_grouped) for v in seen), seen
    assert not any(c["errors"] for c in callbacks)
    assert all(c["flags"] == sorted(c["variants"]) for c in callbacks)
    return variant


def _expected_events(anon: str) -> Counter[tuple[str, str]]:
    return Counter(
        {
            ("$groupidentify", "backend"): 1,
            ("$pageview", anon): 1,
            ("$autocapture", anon): 1,
            ("$feature_flag_called", anon): 2,
            ("$identify", USER): 1,
            ("$feature_flag_called", USER): 3,
            ("$groupidentify", USER): 1,
            ("checkout started", USER): 1,
            ("survey shown", USER): 1,
            ("survey sent", USER): 1,
            ("$pageleave", USER): 1,
        }
    )


def _check_events(
    state: ProjectState,
    report: DriverReport,
    page_url: str,
    variant: str,
    flags: dict[str, dict[str, Any]],
) -> None:
    anon = report.results["anonId"]
    expected = _expected_events(anon)
    assert state.names() == expected
    # Every event but the backend's and the beacon's went out in the page's own requests.
    expected_sent: Counter[str] = Counter()
    for (name, distinct_id), count in expected.items():
        if distinct_id != "backend" and name != "$pageleave":
            expected_sent[name] += count
    assert _sent_event_names(report.requests) == expected_sent

    browser_events = [e for e in state.events if e["distinct_id"] != "backend"]
    sessions = {e["properties"]["$session_id"] for e in browser_events}
    assert len(sessions) == 1, sessions
    for e in browser_events:
        props = e["properties"]
        assert props["token"] == PROJECT_TOKEN and props["distinct_id"] == e["distinct_id"]
        assert props["$lib"] == "web" and props["$lib_version"] == JS_VERSION
        assert props["$current_url"] == page_url and props["$device_id"] == anon
        assert props["$ip"] == "127.0.0.1"
        assert e["historical"] is False
    # Besides posthog-js's own $-properties, events carry only what the page gave them.
    custom = {
        e["event"]: sorted(k for k in e["properties"] if not k.startswith("$"))
        for e in browser_events
    }
    assert custom == {
        **{name: ["distinct_id", "token"] for name, _ in expected if name != "$pageview"},
        "$pageview": ["distinct_id", "title", "token"],
        "checkout started": ["distinct_id", "items", "plan", "token"],
    }
    assert state.only("$pageview")["properties"]["title"] == "Flagstaff end-to-end shop"
    checkout = state.only("checkout started")["properties"]
    assert checkout["plan"] == "pro" and checkout["items"] == 3

    click = state.only("$autocapture")["properties"]
    assert click["$event_type"] == "click" and click["$el_text"] == "Buy the pro plan"
    assert click["$elements_chain"].startswith('button.cta:attr__class="cta"')
    assert 'attr__id="buy"' in click["$elements_chain"]

    identify = state.only("$identify")["properties"]
    assert identify["$anon_distinct_id"] == anon
    assert identify["$set"] == {"plan": "pro", "email": EMAIL}
    assert identify["$set_once"]["first_seen"] == "2026-01-01"

    called = state.all("$feature_flag_called")
    assert Counter(
        (
            e["distinct_id"],
            e["properties"]["$feature_flag"],
            e["properties"]["$feature_flag_response"],
        )
        for e in called
    ) == Counter(
        {
            (anon, "pro-feature", False): 1,
            (anon, "everyone-banner", True): 1,
            (USER, "pro-feature", True): 1,
            (USER, "checkout-variant", variant): 1,
            (USER, "company-beta", True): 1,
        }
    )
    for e in called:
        props = e["properties"]
        assert props["$feature_flag_id"] == flags[props["$feature_flag"]]["id"]

    grouped = state.only("$groupidentify", USER)["properties"]
    assert (grouped["$group_type"], grouped["$group_key"]) == ("company", "acme")
    assert grouped["$group_set"] == BROWSER_ACME
    for name in ("checkout started", "survey shown", "survey sent", "$pageleave"):
        assert state.only(name)["properties"]["$groups"] == {"company": "acme"}, name
    assert state.only("survey shown")["properties"]["$survey_id"] == SURVEY
    answered = state.only("survey sent")["properties"]
    assert answered["$survey_id"] == SURVEY and answered["$survey_response_q1"] == "9"
    assert answered["$survey_questions"] == [
        {"id": "q1", "question": "How likely are you to recommend us?"}
    ]


def _check_visitor_and_company(state: ProjectState, mgmt: Api, anon: str, page_url: str) -> None:
    # The anonymous visitor's events now belong to the identified person.
    state.assert_people({"ada": {anon, USER}})
    state.assert_no_person("backend")
    state.assert_events_belong_to_people()
    person = state.person(USER)
    assert person["is_identified"] is True
    props = person["properties"]
    assert props["plan"] == "pro" and props["email"] == EMAIL
    assert props["first_seen"] == "2026-01-01"
    assert props[f"$survey_responded/{SURVEY}"] is True
    assert props["$initial_current_url"] == props["$current_url"] == page_url
    assert props["$browser"] == props["$initial_browser"] == "Chrome"
    # Beyond the SDK's $-properties, only what the page set, and the campaign parameters
    # posthog-js records (all absent on this visit).
    own = {k: v for k, v in props.items() if not k.startswith("$")}
    assert {k for k, v in own.items() if v is not None} == {"plan", "email", "first_seen"}

    assert state.group_types == {"company": 0}
    acme = group(mgmt, 0, "acme")
    assert acme is not None and acme["group_properties"] == {**BACKEND_ACME, **BROWSER_ACME}
    assert state.warnings == []


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_posthog_js_journey(transport: str, flagstaff: Server, mgmt: Api) -> None:
    flags = create_flags(mgmt)
    mgmt.create_flag(key=DEVICE_FLAG, filters=DEVICE_FLAG_FILTERS, bucketing_identifier="device_id")
    _register_company_from_backend(flagstaff)

    report, page_url = _run_journey(flagstaff, transport)
    assert report.raw["problems"] == []
    _check_transport(transport, report, site_origin=page_url.rsplit("/", 1)[0])
    variant = _check_flags(flagstaff, report.results)
    state = ProjectState.read(mgmt)
    _check_events(state, report, page_url, variant, flags)
    _check_visitor_and_company(state, mgmt, report.results["anonId"], page_url)
