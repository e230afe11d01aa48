"""Surveys and early access features over real HTTP: management, public lists, remote config,
survey events counted, and the flags a survey or feature maintains."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import msgspec
import pytest

from tests.server import PROJECT_TOKEN, Api

SURVEYS = "/api/projects/@current/surveys/"
FEATURES = "/api/projects/@current/early_access_feature/"
FLAGS = "/api/projects/@current/feature_flags/"
PAST = "2024-01-01T00:00:00Z"


def _name(prefix: str = "survey") -> str:
    return f"{prefix} {uuid.uuid4().hex[:10]}"


def _error(r: httpx.Response, status: int, attr: str | None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["detail"] and body["type"]
    assert body["attr"] == attr, body
    return body


def _survey(api: Api, **fields: Any) -> dict[str, Any]:
    body = {
        "name": _name(),
        "type": "popover",
        "questions": [
            {"type": "single_choice", "question": "Which?", "choices": ["A", "B", "Other"]},
            {"type": "rating", "question": "How much?", "scale": 5, "display": "number"},
            {"type": "open", "question": "Why?"},
        ],
        **fields,
    }
    r = api.post(SURVEYS, json=body)
    assert r.status_code == 201, r.text
    return r.json()


def _public(http: httpx.Client) -> dict[str, dict[str, Any]]:
    r = http.get("/api/surveys/", params={"token": PROJECT_TOKEN})
    assert r.status_code == 200, r.text
    return {s["id"]: s for s in r.json()["surveys"]}


def _until(check: Callable[[], Any], timeout: float = 3.0) -> Any:
    """Poll ``check`` until it returns something true: every worker's cache re-reads the
    project's version within its refresh interval."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _served(http: httpx.Client, survey_id: str) -> dict[str, Any] | None:
    return _until(lambda: _public(http).get(survey_id))


def _not_served(http: httpx.Client, survey_id: str) -> bool:
    return bool(_until(lambda: survey_id not in _public(http)))


def _send(http: httpx.Client, events: list[dict[str, Any]]) -> None:
    r = http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": events})
    assert r.status_code == 200, r.text


def _flags(http: httpx.Client, distinct_id: str, **extra: Any) -> dict[str, Any]:
    r = http.post("/flags/?v=2", json={"token": PROJECT_TOKEN, "distinct_id": distinct_id, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _enabled(http: httpx.Client, distinct_id: str, key: str) -> bool:
    """The flag's value once every worker serves it (a new flag is compiled within the
    definitions refresh interval)."""
    flags = _until(lambda: _flags(http, distinct_id)["flags"].get(key))
    assert flags is not None, key
    return bool(flags["enabled"])


def test_create_makes_the_targeting_and_internal_flags(api: Api) -> None:
    targeting = {"groups": [{"properties": [{"key": "plan", "value": ["pro"], "type": "person"}]}]}
    survey = _survey(api, start_date=PAST, targeting_flag_filters=targeting)
    assert all(q["id"] for q in survey["questions"])
    keys = {k["key"]: k["value"] for k in survey["feature_flag_keys"]}
    assert keys["targeting_flag_key"].startswith("survey-targeting-")
    assert keys["internal_targeting_flag_key"].endswith("-custom")
    internal = survey["internal_targeting_flag"]
    assert internal["active"] is True
    props = internal["filters"]["groups"][0]["properties"]
    assert {p["key"] for p in props} == {
        f"$survey_dismissed/{survey['id']}",
        f"$survey_responded/{survey['id']}",
    }
    flag = api.get(f"{FLAGS}{survey['targeting_flag']['id']}/").json()
    assert flag["filters"]["groups"] == targeting["groups"]
    assert flag["name"] == f"Targeting flag for survey {survey['name']}"
    # the flags a survey makes are in the activity log, as the survey's author's changes
    for made in (survey["targeting_flag"], internal):
        log = api.get(f"{FLAGS}{made['id']}/activity/").json()["results"]
        assert [entry["activity"] for entry in log] == ["created"]
        assert log[0]["is_system"] is False


def test_list_retrieve_patch_put_archive_delete(api: Api, http: httpx.Client) -> None:
    survey = _survey(api, start_date=PAST)
    sid = survey["id"]
    assert api.get(f"{SURVEYS}{sid}/").json()["name"] == survey["name"]

    page = api.get(SURVEYS, params={"limit": 1}).json()
    assert page["count"] >= 1 and len(page["results"]) == 1
    assert page["next"] is not None and "offset=1" in page["next"]

    patched = api.patch(f"{SURVEYS}{sid}/", json={"description": "new"}).json()
    assert patched["description"] == "new"
    assert patched["questions"] == survey["questions"]  # kept, ids included

    put = api.client.put(
        f"{SURVEYS}{sid}/",
        json={
            "name": survey["name"],
            "type": "api",
            "start_date": PAST,
            "questions": [{"type": "open", "question": "?"}],
        },
    )
    assert put.status_code == 200, put.text
    assert put.json()["type"] == "api" and put.json()["description"] == ""
    assert _served(http, sid)

    r = api.post(f"{SURVEYS}{sid}/archive/")
    assert r.status_code == 200 and r.json()["archived"] is True
    assert _not_served(http, sid)
    internal_id = r.json()["internal_targeting_flag"]["id"]
    assert api.get(f"{FLAGS}{internal_id}/").json()["active"] is False

    assert api.delete(f"{SURVEYS}{sid}/").status_code == 204
    assert api.get(f"{SURVEYS}{sid}/").status_code == 404
    assert api.get(f"{FLAGS}{internal_id}/").json()["deleted"] is True


def test_remove_targeting_flag_deletes_it(api: Api) -> None:
    survey = _survey(
        api, targeting_flag_filters={"groups": [{"properties": [], "rollout_percentage": 50}]}
    )
    flag_id = survey["targeting_flag"]["id"]
    r = api.patch(f"{SURVEYS}{survey['id']}/", json={"remove_targeting_flag": True})
    assert r.status_code == 200 and r.json()["targeting_flag"] is None
    assert api.get(f"{FLAGS}{flag_id}/").json()["deleted"] is True


@pytest.mark.parametrize(
    ("body", "attr"),
    [
        ({"type": "popover"}, "name"),
        ({"name": "x", "type": "nope"}, "type"),
        (
            {"name": "x", "type": "popover", "questions": [{"type": "open"}]},
            "questions[0].question",
        ),
        (
            {
                "name": "x",
                "type": "popover",
                "questions": [{"type": "single_choice", "question": "?", "choices": []}],
            },
            "questions[0].choices",
        ),
        ({"name": "x", "type": "popover", "linked_flag_id": 99999999}, "linked_flag_id"),
        ({"name": "x", "type": "popover", "start_date": "tomorrow"}, "start_date"),
        ({"name": "x", "type": "popover", "responses_limit": -1}, "responses_limit"),
    ],
)
def test_bad_survey_bodies_name_the_field(api: Api, body: dict[str, Any], attr: str) -> None:
    _error(api.post(SURVEYS, json=body), 400, attr)


def test_bad_requests(api: Api, http: httpx.Client) -> None:
    existing = _survey(api)
    _error(api.post(SURVEYS, json={"name": existing["name"], "type": "api"}), 400, "name")
    _error(api.post(SURVEYS, content=b"{nope"), 400, None)
    _error(api.post(SURVEYS, json=[1]), 400, None)
    assert api.get(f"{SURVEYS}{uuid.uuid4()}/").status_code == 404
    assert api.get(f"{SURVEYS}{uuid.uuid4()}/stats/").status_code == 404
    _error(api.get(SURVEYS, params={"limit": "x"}), 400, "limit")
    _error(
        api.get(f"{SURVEYS}{existing['id']}/summary/", params={"question_id": "nope"}),
        400,
        "question_id",
    )
    assert http.get("/api/surveys/").status_code == 401
    unknown = {"token": "phc_unknownunknownunknown"}
    assert http.get("/api/surveys/", params=unknown).status_code == 401
    _error(
        http.get("/api/early_access_features/", params={"token": PROJECT_TOKEN, "stage": "x"}),
        400,
        "stage",
    )


def test_public_list_and_remote_config(api: Api, http: httpx.Client) -> None:
    future = _survey(api, start_date="2999-01-01T00:00:00Z")
    live = _survey(api, start_date=PAST)
    served = _served(http, live["id"])
    assert served is not None and future["id"] not in _public(http)
    keys = {k["key"]: k["value"] for k in live["feature_flag_keys"]}
    assert served["internal_targeting_flag_key"] == keys["internal_targeting_flag_key"]
    assert served["questions"] == live["questions"]
    assert "description" not in served
    r = http.get(
        "/api/surveys/", params={"token": PROJECT_TOKEN}, headers={"Origin": "https://x.test"}
    )
    assert r.headers["access-control-allow-origin"] == "https://x.test"
    assert http.get(f"/array/{PROJECT_TOKEN}/config").json()["surveys"] is True
    assert '"surveys":true' in http.get(f"/array/{PROJECT_TOKEN}/config.js").text
    r = http.post("/flags/?v=2&config=true", json={"token": PROJECT_TOKEN, "distinct_id": "x"})
    assert r.json()["surveys"] is True


def test_survey_events_are_counted(api: Api, http: httpx.Client) -> None:
    survey = _survey(api, start_date=PAST, responses_limit=2)
    sid = survey["id"]
    q = [x["id"] for x in survey["questions"]]
    shown = {"event": "survey shown", "properties": {"$survey_id": sid}}
    events = [
        {**shown, "distinct_id": "p1", "uuid": str(uuid.uuid4())},
        {**shown, "distinct_id": "p2", "uuid": str(uuid.uuid4())},
        {**shown, "distinct_id": "p3", "uuid": str(uuid.uuid4())},
        {
            "event": "survey sent",
            "distinct_id": "p1",
            "properties": {
                "$survey_id": sid,
                f"$survey_response_{q[0]}": "A",
                f"$survey_response_{q[1]}": 4,
                f"$survey_response_{q[2]}": "great",
                "$survey_submission_id": "s1",
            },
        },
        {
            "event": "survey dismissed",
            "distinct_id": "p2",
            "properties": {"$survey_id": sid},
        },
        # another survey's id and a survey that does not exist: not counted here
        {"event": "survey shown", "distinct_id": "p4", "properties": {"$survey_id": "nope"}},
    ]
    _send(http, events)
    _send(http, events[:1])  # the same event again (same uuid): counted once
    stats = api.get(f"{SURVEYS}{sid}/stats/").json()
    assert stats["survey_id"] == sid
    assert stats["stats"]["survey shown"]["total_count"] == 3
    assert stats["stats"]["survey shown"]["unique_persons"] == 3
    assert stats["stats"]["survey sent"]["total_count"] == 1
    assert stats["stats"]["survey dismissed"]["total_count"] == 1
    assert stats["rates"]["response_rate"] == pytest.approx(33.33)

    summary = api.get(f"{SURVEYS}{sid}/summary/").json()
    by_id = {row["id"]: row for row in summary["questions"]}
    assert by_id[q[0]]["choices"] == {"A": 1, "B": 0, "Other": 0}
    assert by_id[q[1]]["distribution"]["4"] == 1
    assert by_id[q[2]]["open_answers"]["results"][0]["response"] == "great"
    one = api.get(f"{SURVEYS}{sid}/summary/", params={"question_id": q[2], "limit": 1}).json()
    assert [row["id"] for row in one["questions"]] == [q[2]]

    assert api.get(f"{SURVEYS}stats/").json()["stats"]["survey shown"]["total_count"] >= 3

    # a second answer reaches responses_limit (2): the survey is no longer served
    assert _served(http, sid)
    _send(
        http,
        [
            {
                "event": "survey sent",
                "distinct_id": "p3",
                "properties": {"$survey_id": sid, "$survey_submission_id": "s2"},
            }
        ],
    )
    assert _not_served(http, sid)


def test_answering_turns_the_internal_flag_off(api: Api, http: httpx.Client) -> None:
    survey = _survey(api, start_date=PAST)
    key = survey["internal_targeting_flag"]["key"]
    person = f"person-{uuid.uuid4().hex[:8]}"
    assert _enabled(http, person, key) is True
    _send(
        http,
        [
            {
                "event": "survey sent",
                "distinct_id": person,
                "properties": {
                    "$survey_id": survey["id"],
                    "$set": {f"$survey_responded/{survey['id']}": True},
                },
            }
        ],
    )
    assert _enabled(http, person, key) is False


def test_early_access_features(api: Api, http: httpx.Client) -> None:
    name = _name("Feature")
    r = api.post(FEATURES, json={"name": name, "stage": "beta", "description": "d"})
    assert r.status_code == 201, r.text
    feature = r.json()
    flag = feature["feature_flag"]
    assert flag["key"] == name.lower().replace(" ", "-")
    assert flag["filters"]["super_groups"][0]["properties"][0]["key"] == (
        f"$feature_enrollment/{flag['key']}"
    )
    assert api.get(f"{FEATURES}{feature['id']}/").json()["name"] == name
    assert api.get(FEATURES).json()["count"] >= 1

    listed = http.get(
        "/api/early_access_features/", params={"token": PROJECT_TOKEN, "stage": "beta"}
    ).json()["earlyAccessFeatures"]
    mine = [f for f in listed if f["id"] == feature["id"]]
    assert mine and mine[0]["flagKey"] == flag["key"] and mine[0]["stage"] == "beta"
    alpha = http.get(
        f"/api/early_access_features/?token={PROJECT_TOKEN}&stage=alpha&stage=concept"
    ).json()["earlyAccessFeatures"]
    assert feature["id"] not in {f["id"] for f in alpha}
    both = http.get(f"/api/early_access_features/?token={PROJECT_TOKEN}&stage=alpha&stage=beta")
    assert feature["id"] in {f["id"] for f in both.json()["earlyAccessFeatures"]}

    person = f"person-{uuid.uuid4().hex[:8]}"
    assert _enabled(http, person, flag["key"]) is False
    enroll = {
        "event": "$feature_enrollment_update",
        "distinct_id": person,
        "properties": {
            "$feature_flag": flag["key"],
            "$feature_enrollment": True,
            "$set": {f"$feature_enrollment/{flag['key']}": True},
        },
    }
    _send(http, [enroll])
    assert _enabled(http, person, flag["key"]) is True
    enroll["properties"]["$set"] = {f"$feature_enrollment/{flag['key']}": False}
    _send(http, [enroll])
    assert _enabled(http, person, flag["key"]) is False

    # leaving the release stages clears the enrollment condition; the flag is kept
    r = api.patch(f"{FEATURES}{feature['id']}/", json={"stage": "archived"})
    assert r.status_code == 200 and r.json()["feature_flag"]["filters"].get("super_groups") is None
    assert api.delete(f"{FEATURES}{feature['id']}/").status_code == 204
    assert api.get(f"{FEATURES}{feature['id']}/").status_code == 404
    assert api.get(f"{FLAGS}{flag['id']}/").json()["deleted"] is False


def test_early_access_bad_input(api: Api) -> None:
    _error(api.post(FEATURES, json={"stage": "beta"}), 400, "name")
    _error(api.post(FEATURES, json={"name": _name(), "stage": "gamma"}), 400, "stage")
    _error(
        api.post(FEATURES, json={"name": _name(), "stage": "beta", "documentation_url": "x"}),
        400,
        "documentation_url",
    )
    _error(
        api.post(FEATURES, json={"name": _name(), "stage": "beta", "feature_flag_id": 99999999}),
        400,
        "feature_flag_id",
    )
    multi = api.create_flag(
        key=f"multi-{uuid.uuid4().hex[:8]}",
        filters={
            "groups": [{"properties": []}],
            "multivariate": {"variants": [{"key": "a", "rollout_percentage": 100}]},
        },
    )
    _error(
        api.post(FEATURES, json={"name": _name(), "stage": "beta", "feature_flag_id": multi["id"]}),
        400,
        "feature_flag_id",
    )
    taken = api.create_flag(key=f"taken-{uuid.uuid4().hex[:8]}")
    _error(api.post(FEATURES, json={"name": taken["key"], "stage": "beta"}), 400, "name")
    linked = api.create_flag(key=f"linked-{uuid.uuid4().hex[:8]}")
    body = {"name": _name(), "stage": "alpha", "feature_flag_id": linked["id"]}
    r = api.post(FEATURES, json=body)
    assert r.status_code == 201, r.text
    _error(
        api.post(FEATURES, json={**body, "name": _name()}),
        400,
        "feature_flag_id",
    )
    assert api.get(f"{FEATURES}{uuid.uuid4()}/").status_code == 404


def test_answers_match_their_documented_schemas(api: Api, http: httpx.Client) -> None:
    from flagstaff.http import survey_schemas as ss

    targeting = {"groups": [{"properties": [], "rollout_percentage": 10}]}
    survey = _survey(api, start_date=PAST, targeting_flag_filters=targeting)
    msgspec.convert(survey, ss.Survey)
    msgspec.convert(api.get(SURVEYS).json(), ss.SurveyPage)
    msgspec.convert(api.get(f"{SURVEYS}{survey['id']}/stats/").json(), ss.SurveyStats)
    msgspec.convert(api.get(f"{SURVEYS}stats/").json(), ss.AllSurveyStats)
    msgspec.convert(api.get(f"{SURVEYS}{survey['id']}/summary/").json(), ss.SurveySummary)
    feature = api.post(FEATURES, json={"name": _name("Doc"), "stage": "beta"}).json()
    msgspec.convert(feature, ss.EarlyAccessFeature)
    msgspec.convert(api.get(FEATURES).json(), ss.EarlyAccessFeaturePage)
    msgspec.convert(
        _until(lambda: http.get("/api/surveys/", params={"token": PROJECT_TOKEN}).json()),
        ss.PublicSurveyList,
    )
    listed = http.get("/api/early_access_features/", params={"token": PROJECT_TOKEN}).json()
    msgspec.convert(listed, ss.PublicEarlyAccessFeatureList)
