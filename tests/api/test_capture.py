"""Event ingestion over HTTP: routes, SDK bodies, errors, persons, groups, durability."""

from __future__ import annotations

import base64
import gzip
import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import PERSONAL_KEY, Api, Server

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sdk"
FIXTURE_TOKEN = "phc_flagstaff_fixture_token"
P = "/api/projects/@current"


def _uid() -> str:
    return uuid.uuid4().hex[:12]


def events_of(api: Api, distinct_id: str) -> list[dict[str, Any]]:
    r = api.get(f"{P}/events/", params={"distinct_id": distinct_id, "limit": 1000})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def person_of(api: Api, distinct_id: str) -> dict[str, Any] | None:
    results = api.get(f"{P}/persons/", params={"distinct_id": distinct_id}).json()["results"]
    return results[0] if results else None


def warnings_of(api: Api) -> list[dict[str, Any]]:
    return api.get(f"{P}/ingestion_warnings/", params={"limit": 1000}).json()["results"]


@pytest.mark.parametrize(
    "path", ["/e/", "/e", "/i/v0/e/", "/i/v0/e", "/capture/", "/capture", "/track/", "/engage/"]
)
def test_single_event_routes(http: httpx.Client, api: Api, token: str, path: str) -> None:
    did = _uid()
    r = http.post(path, json={"api_key": token, "event": "clicked", "distinct_id": did})
    assert r.status_code == 200, r.text
    assert r.json() == {"status": 1}
    assert [e["event"] for e in events_of(api, did)] == ["clicked"]


def test_capture_with_token_field_and_distinct_id_in_properties(
    http: httpx.Client, api: Api, token: str
) -> None:
    did = _uid()
    r = http.post(
        "/capture/",
        json={
            "token": token,
            "event": "$pageview",
            "properties": {
                "distinct_id": did,
                "$current_url": "https://x.test/a",
                "$session_id": "s1",
            },
        },
    )
    assert r.status_code == 200
    [e] = events_of(api, did)
    assert e["properties"]["$current_url"] == "https://x.test/a"
    assert e["properties"]["$session_id"] == "s1"


def test_batch_with_every_special_kind_keeps_properties(
    http: httpx.Client, api: Api, token: str
) -> None:
    did = _uid()
    batch = [
        {"event": "$pageview", "properties": {"distinct_id": did, "$current_url": "/p"}},
        {"event": "$screen", "properties": {"distinct_id": did, "$screen_name": "Home"}},
        {
            "event": "survey sent",
            "properties": {
                "distinct_id": did,
                "$survey_id": "s-1",
                "$survey_response_q1": "great",
                "$survey_questions": [{"id": "q1", "question": "How?"}],
            },
        },
        {"event": "survey shown", "properties": {"distinct_id": did, "$survey_id": "s-1"}},
        {"event": "survey dismissed", "properties": {"distinct_id": did, "$survey_id": "s-1"}},
        {
            "event": "$feature_flag_called",
            "properties": {"distinct_id": did, "$feature_flag": "f", "$feature_flag_response": "v"},
        },
        {"event": "bought", "properties": {"distinct_id": did, "$feature/f": "v"}},
        {"event": "grouped", "properties": {"distinct_id": did, "$groups": {"company": "c1"}}},
    ]
    r = http.post("/batch/", json={"api_key": token, "batch": batch})
    assert r.status_code == 200 and r.json() == {"status": 1}
    stored = {e["event"]: e["properties"] for e in events_of(api, did)}
    assert len(stored) == len(batch)
    assert stored["survey sent"]["$survey_questions"] == [{"id": "q1", "question": "How?"}]
    assert stored["bought"]["$feature/f"] == "v"
    assert stored["$feature_flag_called"]["$feature_flag_response"] == "v"
    assert stored["grouped"]["$groups"] == {"company": "c1"}
    # $groups never creates a group
    r = api.get(f"{P}/groups/find", params={"group_type_index": 0, "group_key": "c1"})
    assert r.status_code == 404


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"properties": {"distinct_id": "x"}}, "event"),
        ({"event": "", "properties": {"distinct_id": "x"}}, "event"),
        ({"event": "no-id"}, "distinct_id"),
        ({"event": "empty-id", "distinct_id": ""}, "distinct_id"),
        ({"event": "survey sent", "distinct_id": "x"}, "survey"),
        (
            {
                "event": "$groupidentify",
                "distinct_id": "x",
                "properties": {"$group_type": "t" * 401, "$group_key": "k"},
            },
            "group",
        ),
        (
            {
                "event": "$groupidentify",
                "distinct_id": "x",
                "properties": {"$group_type": "company", "$group_key": 5},
            },
            "group",
        ),
    ],
)
def test_invalid_events_answer_200_are_not_ingested_and_leave_a_warning(
    http: httpx.Client, api: Api, token: str, event: dict[str, Any], reason: str
) -> None:
    marker = _uid()
    good = {"event": "good", "distinct_id": marker}
    before = len(warnings_of(api))
    r = http.post("/batch/", json={"api_key": token, "batch": [event, good]})
    assert r.status_code == 200
    assert [e["event"] for e in events_of(api, marker)] == ["good"]
    warnings = warnings_of(api)
    assert len(warnings) == before + 1
    assert reason in warnings[0]["type"] + json.dumps(warnings[0]["details"])
    metrics = http.get("/metrics").text
    assert "flagstaff_events_dropped_total{reason=" in metrics


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b"\x1f\x8b\x08\x00garbage", 400),
        (b"", 400),
    ],
)
def test_malformed_bodies(http: httpx.Client, body: bytes, status: int) -> None:
    r = http.post("/batch/", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["detail"]


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"event": "x", "distinct_id": "d"}, "token"),
        ({"api_key": "", "event": "x", "distinct_id": "d"}, "empty"),
        ({"api_key": "phc_nosuchproject", "event": "x", "distinct_id": "d"}, "token"),
        ({"api_key": PERSONAL_KEY, "event": "x", "distinct_id": "d"}, "personal"),
        ({"api_key": "phc_" + "x" * 80, "event": "x", "distinct_id": "d"}, "64"),
    ],
)
def test_bad_tokens_get_401(http: httpx.Client, body: dict[str, Any], detail: str) -> None:
    r = http.post("/i/v0/e/", json=body)
    assert r.status_code == 401, r.text
    assert detail in r.json()["detail"].lower()


def test_gzip_and_base64_and_form_bodies(http: httpx.Client, api: Api, token: str) -> None:
    did = _uid()
    payload = json.dumps({"api_key": token, "batch": [{"event": "gz", "distinct_id": did}]})
    r = http.post(
        "/batch/", content=gzip.compress(payload.encode()), headers={"Content-Type": "text/plain"}
    )
    assert r.status_code == 200, r.text
    r = http.post(
        "/batch/?compression=gzip-js", content=gzip.compress(payload.replace("gz", "gzjs").encode())
    )
    assert r.status_code == 200, r.text
    b64 = base64.b64encode(payload.replace('"gz"', '"b64"').encode()).decode()
    r = http.post("/e/?compression=base64", data={"data": b64})
    assert r.status_code == 200, r.text
    r = http.get(
        "/e/", params={"data": base64.b64encode(payload.replace('"gz"', '"get"').encode()).decode()}
    )
    assert r.status_code == 200, r.text
    assert sorted(e["event"] for e in events_of(api, did)) == ["b64", "get", "gz", "gzjs"]


def test_body_limit_is_413_also_after_decompression(tmp_path: Path) -> None:
    srv = Server(data_dir=tmp_path / "d", env={"FLAGSTAFF_BODY_LIMIT": "100000"}).start()
    try:
        big = json.dumps({"api_key": "x", "batch": [{"event": "e" * 200_000}]}).encode()
        r = httpx.post(srv.url + "/batch/", content=big)
        assert r.status_code == 413 and r.json()["detail"]
        bomb = gzip.compress(b"[" + b" " * 5_000_000 + b"]")
        r = httpx.post(srv.url + "/batch/", content=bomb, headers={"Content-Encoding": "gzip"})
        assert r.status_code == 413, r.text
    finally:
        srv.stop()


def test_cors_preflight_and_headers(http: httpx.Client, token: str) -> None:
    r = http.options(
        "/e/",
        headers={
            "Origin": "https://shop.test",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "https://shop.test"
    assert "content-type" in r.headers["access-control-allow-headers"]
    r = http.post(
        "/e/",
        json={"api_key": token, "event": "x", "distinct_id": "c"},
        headers={"Origin": "https://shop.test"},
    )
    assert r.headers["access-control-allow-origin"] == "https://shop.test"


def test_beacon_answers_204(http: httpx.Client, token: str) -> None:
    r = http.post("/e/?beacon=1", json={"api_key": token, "event": "x", "distinct_id": "b"})
    assert r.status_code == 204


def test_retried_event_is_stored_once(http: httpx.Client, api: Api, token: str) -> None:
    did = _uid()
    event = {"event": "once", "distinct_id": did, "uuid": str(uuid.uuid4())}
    for _ in range(3):
        assert http.post("/batch/", json={"api_key": token, "batch": [event]}).status_code == 200
    assert len(events_of(api, did)) == 1


def test_identify_then_flags_see_new_properties_immediately(
    http: httpx.Client, api: Api, token: str
) -> None:
    anon, user = _uid(), _uid()
    key = f"pro-only-{_uid()}"
    api.create_flag(
        key=key,
        filters={
            "groups": [
                {
                    "properties": [
                        {"key": "plan", "value": "pro", "type": "person", "operator": "exact"}
                    ],
                    "rollout_percentage": 100,
                }
            ]
        },
    )
    time.sleep(0.3)
    http.post("/e/", json={"api_key": token, "event": "$pageview", "distinct_id": anon})
    flags = http.post("/flags/?v=2", json={"api_key": token, "distinct_id": user}).json()
    assert flags["flags"][key]["enabled"] is False
    r = http.post(
        "/e/",
        json={
            "api_key": token,
            "event": "$identify",
            "distinct_id": user,
            "properties": {"$anon_distinct_id": anon, "$set": {"plan": "pro"}},
        },
    )
    assert r.status_code == 200
    flags = http.post("/flags/?v=2", json={"api_key": token, "distinct_id": user}).json()
    assert flags["flags"][key]["enabled"] is True
    person = person_of(api, anon)
    assert person is not None and sorted(person["distinct_ids"]) == sorted([anon, user])
    assert person["properties"]["plan"] == "pro" and person["is_identified"] is True
    events = events_of(api, anon) + events_of(api, user)
    assert {e["person"]["uuid"] for e in events} == {person["uuid"]}


def test_anonymous_events_create_no_person(http: httpx.Client, api: Api, token: str) -> None:
    did = _uid()
    r = http.post(
        "/i/v0/e/",
        json={
            "api_key": token,
            "event": "x",
            "distinct_id": did,
            "properties": {"$process_person_profile": False, "$set": {"a": 1}},
        },
    )
    assert r.status_code == 200
    assert person_of(api, did) is None
    assert len(events_of(api, did)) == 1


def test_group_identify_upserts_groups(http: httpx.Client, api: Api, token: str) -> None:
    key = _uid()
    for props in ({"name": "Acme", "founded": "2020-01-01T00:00:00Z"}, {"plan": "pro"}):
        r = http.post(
            "/batch/",
            json={
                "api_key": token,
                "batch": [
                    {
                        "event": "$groupidentify",
                        "distinct_id": "srv",
                        "properties": {
                            "$group_type": "company",
                            "$group_key": key,
                            "$group_set": props,
                        },
                    }
                ],
            },
        )
        assert r.status_code == 200
    types = api.get(f"{P}/groups_types/").json()
    index = next(t["group_type_index"] for t in types if t["group_type"] == "company")
    group = api.get(f"{P}/groups/find", params={"group_type_index": index, "group_key": key}).json()
    assert group["group_properties"] == {
        "name": "Acme",
        "founded": "2020-01-01T00:00:00Z",
        "plan": "pro",
    }


def test_historical_migration_rules(http: httpx.Client, api: Api, token: str) -> None:
    did = _uid()
    old = (datetime.now(UTC) - timedelta(days=10)).isoformat()
    recent = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    batch = [
        {"event": "old", "properties": {"distinct_id": did}, "timestamp": old},
        {"event": "recent", "properties": {"distinct_id": did}, "timestamp": recent},
        {"event": "untimed", "properties": {"distinct_id": did}},
    ]
    r = http.post("/batch/", json={"api_key": token, "historical_migration": True, "batch": batch})
    assert r.status_code == 200
    [event] = events_of(api, did)
    assert event["event"] == "old" and event["historical"] is True
    assert event["timestamp"][:16] == old[:16]


def _fixtures() -> Iterator[Path]:
    yield from sorted(FIXTURES.glob("*.json"))


@pytest.fixture(scope="module")
def fixture_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        data_dir=tmp_path_factory.mktemp("fixtures") / "d",
        env={"FLAGSTAFF_INIT_PROJECT_TOKEN": FIXTURE_TOKEN},
    ).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.parametrize("path", list(_fixtures()), ids=lambda p: p.stem)
def test_sdk_recorded_requests_are_accepted(fixture_server: Server, path: Path) -> None:
    rec = json.loads(path.read_text())
    keep = {"content-type", "content-encoding", "user-agent", "origin"}
    headers = {k: v for k, v in rec["headers"].items() if k.lower() in keep}
    url = f"{fixture_server.url}{rec['path']}" + (f"?{rec['query']}" if rec["query"] else "")
    body = base64.b64decode(rec["body_base64"])
    r = httpx.request(rec["method"], url, content=body or None, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    if rec["method"] == "OPTIONS":
        assert r.headers["access-control-allow-origin"]
    elif rec["events"]:
        assert r.json() == {"status": 1}
        api = Api(fixture_server.url)
        stored = api.get(f"{P}/events/", params={"limit": 1000}).json()["results"]
        names = {e["event"] for e in stored}
        assert set(rec["events"]) <= names
    elif rec["path"].startswith("/flags"):
        body = r.json()
        assert {"flags", "errorsWhileComputingFlags", "requestId"} <= set(body)
    elif rec["path"].endswith("config.js"):
        assert FIXTURE_TOKEN in r.text and "_POSTHOG_REMOTE_CONFIG" in r.text
