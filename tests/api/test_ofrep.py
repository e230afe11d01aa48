"""OpenFeature Remote Evaluation Protocol (OFREP) over real HTTP: auth, error codes, reasons,
the value/variant/payload mapping, the bulk answer with its ETag and 304, the configuration,
the flag quota, and agreement with /flags on stored persons, groups and cohorts.

Each test works in a project of its own, so its flags are the only ones in the answers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Api, Server

SINGLE = "/ofrep/v1/evaluate/flags/{}"
BULK = "/ofrep/v1/evaluate/flags"
SUCCESS_KEYS = {"key", "value", "reason", "variant"}


@dataclass
class Project:
    token: str
    api: Api
    http: httpx.Client

    def flag(self, key: str, **fields: Any) -> dict[str, Any]:
        return self.api.create_flag(key=key, **fields)

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def one(self, key: str, context: Any, **headers: str) -> httpx.Response:
        return self.http.post(
            SINGLE.format(key), json={"context": context}, headers=headers or self.auth()
        )

    def value(self, key: str, context: dict[str, Any]) -> dict[str, Any]:
        r = self.one(key, context)
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) >= SUCCESS_KEYS, body
        return body

    def bulk(self, context: Any, **headers: str) -> httpx.Response:
        return self.http.post(BULK, json={"context": context}, headers={**self.auth(), **headers})

    def flags(self, distinct_id: str, **body: Any) -> dict[str, Any]:
        """``featureFlags`` of /flags (v1): what OFREP's values must equal."""
        r = self.http.post(
            "/flags", json={"api_key": self.token, "distinct_id": distinct_id, **body}
        )
        assert r.status_code == 200, r.text
        return r.json()["featureFlags"]

    def capture(self, *events: dict[str, Any]) -> None:
        r = self.http.post("/batch/", json={"api_key": self.token, "batch": list(events)})
        assert r.status_code == 200, r.text

    def eventually(self, check: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"{what} never happened"
            time.sleep(0.05)

    def visible(self, *keys: str) -> None:
        """Flag changes reach the workers' definitions cache after its refresh."""

        def seen() -> bool:
            r = self.api.get(f"/flags/definitions?token={self.token}")
            return set(keys) <= {flag["key"] for flag in r.json()["flags"]}

        self.eventually(seen, f"flags {keys} visible")


@pytest.fixture
def project(server: Server, api: Api, http: httpx.Client) -> Iterator[Project]:
    r = api.post("/api/projects/", json={"name": f"ofrep-{uuid.uuid4().hex[:8]}"})
    assert r.status_code == 201, r.text
    body = r.json()
    own_api = Api(server.url, body["personal_api_key"])
    try:
        yield Project(body["api_token"], own_api, http)
    finally:
        own_api.client.close()


def on(rollout: float | None = 100, **condition: Any) -> dict[str, Any]:
    return {"groups": [{"properties": [], "rollout_percentage": rollout, **condition}]}


def person(key: str, value: Any, operator: str = "exact") -> dict[str, Any]:
    return {"key": key, "value": value, "operator": operator, "type": "person"}


def variants(*pairs: tuple[str, int]) -> dict[str, Any]:
    return {"variants": [{"key": k, "rollout_percentage": p} for k, p in pairs]}


def assert_failure(r: httpx.Response, status: int, code: str, key: str | None) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["errorCode"] == code
    assert isinstance(body["errorDetails"], str) and body["errorDetails"]
    assert body.get("key") == key


# authentication ----------------------------------------------------------------------------


def test_token_as_bearer_or_api_key_and_401_otherwise(project: Project) -> None:
    project.flag("auth-flag", filters=on())
    project.visible("auth-flag")
    ctx = {"targetingKey": "u1"}
    assert project.value("auth-flag", ctx)["value"] is True
    assert project.one("auth-flag", ctx, **{"X-API-Key": project.token}).status_code == 200
    assert project.one("auth-flag", ctx, Authorization=f"bearer {project.token}").json()["value"]
    refused: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer phc_nosuchtoken00000000000000000000000000"},
        {"X-API-Key": "phc_nosuchtoken00000000000000000000000000"},
        {"Authorization": f"Bearer {PERSONAL_KEY}"},  # a personal key is not a project token
        {"Authorization": project.token},  # no scheme
    ]
    for headers in refused:
        r = project.http.post(SINGLE.format("auth-flag"), json={"context": ctx}, headers=headers)
        assert_failure(r, 401, "GENERAL", "auth-flag")
        r = project.http.post(BULK, json={"context": ctx}, headers=headers)
        assert_failure(r, 401, "GENERAL", None)
        assert project.http.get("/ofrep/v1/configuration", headers=headers).status_code == 401


# error codes -------------------------------------------------------------------------------


def test_error_codes(project: Project) -> None:
    project.flag("err-flag", filters=on())
    project.visible("err-flag")
    url = SINGLE.format("err-flag")
    auth = project.auth()
    cases: list[tuple[Any, int, str]] = [
        (b"{not json", 400, "PARSE_ERROR"),
        (b"", 400, "PARSE_ERROR"),
        (b"[1, 2]", 400, "PARSE_ERROR"),
        (b"{}", 400, "TARGETING_KEY_MISSING"),
        (b'{"context": null}', 400, "TARGETING_KEY_MISSING"),
        (b'{"context": {}}', 400, "TARGETING_KEY_MISSING"),
        (b'{"context": {"targetingKey": "", "plan": "pro"}}', 400, "TARGETING_KEY_MISSING"),
        (b'{"context": "u1"}', 400, "INVALID_CONTEXT"),
        (b'{"context": {"targetingKey": 42}}', 400, "INVALID_CONTEXT"),
        (b'{"context": {"targetingKey": "u1", "groups": ["acme"]}}', 400, "INVALID_CONTEXT"),
    ]
    headers = {**auth, "Content-Type": "application/json"}
    for body, status, code in cases:
        assert_failure(
            project.http.post(url, content=body, headers=headers), status, code, "err-flag"
        )
        assert_failure(project.http.post(BULK, content=body, headers=headers), status, code, None)
    assert_failure(project.http.get(BULK, headers=auth), 405, "GENERAL", None)
    assert_failure(project.http.put(url, headers=auth), 405, "GENERAL", None)
    too_large = b'{"context": {"targetingKey": "u1", "x": "' + b"x" * 30_000_000 + b'"}}'
    assert_failure(
        project.http.post(BULK, content=too_large, headers=headers), 413, "GENERAL", None
    )
    missing = project.one("no-such-flag", {"targetingKey": "u1"})
    assert_failure(missing, 404, "FLAG_NOT_FOUND", "no-such-flag")
    assert "no-such-flag" in missing.json()["errorDetails"]


def test_deleted_flag_is_not_found(project: Project) -> None:
    flag = project.flag("gone-flag", filters=on())
    project.visible("gone-flag")
    assert project.value("gone-flag", {"targetingKey": "u1"})["value"] is True
    r = project.api.patch(
        f"/api/projects/@current/feature_flags/{flag['id']}/", json={"deleted": True}
    )
    assert r.status_code == 200, r.text
    project.eventually(
        lambda: project.one("gone-flag", {"targetingKey": "u1"}).status_code == 404,
        "the deleted flag answered 404",
    )
    assert_failure(
        project.one("gone-flag", {"targetingKey": "u1"}), 404, "FLAG_NOT_FOUND", "gone-flag"
    )


# reasons and mapping -----------------------------------------------------------------------


def _split_ids(project: Project, key: str, n: int = 40) -> dict[str, Any]:
    """/flags' values of ``key`` for ``n`` distinct ids."""
    return {f"split-{i}": project.flags(f"split-{i}")[key] for i in range(n)}


def test_reasons(project: Project) -> None:
    project.flag("pro-only", filters=on(properties=[person("plan", "pro")]))
    project.flag("half", filters=on(50))
    project.flag("half-of-pros", filters=on(50, properties=[person("plan", "pro")]))
    project.flag(
        "ab",
        filters={**on(), "multivariate": variants(("control", 50), ("test", 50))},
    )
    project.flag(
        "pinned",
        filters={
            "groups": [{"properties": [], "rollout_percentage": 100, "variant": "test"}],
            "multivariate": variants(("control", 50), ("test", 50)),
        },
    )
    project.flag("one-variant", filters={**on(), "multivariate": variants(("only", 100))})
    project.flag("switched-off", filters=on(), active=False)
    project.visible("pro-only", "half", "half-of-pros", "ab", "pinned", "one-variant")

    pro = {"targetingKey": "reason-user", "plan": "pro"}
    assert project.value("pro-only", pro) == {
        "key": "pro-only", "value": True, "reason": "TARGETING_MATCH", "variant": "true",
    }  # fmt: skip
    assert project.value("pro-only", {**pro, "plan": "free"}) == {
        "key": "pro-only", "value": False, "reason": "DEFAULT", "variant": "false",
    }  # fmt: skip
    assert project.value("pinned", pro)["reason"] == "TARGETING_MATCH"
    assert project.value("pinned", pro)["value"] == "test"
    assert project.value("one-variant", pro)["reason"] == "TARGETING_MATCH"
    assert project.value("switched-off", pro) == {
        "key": "switched-off", "value": False, "reason": "DISABLED", "variant": "false",
    }  # fmt: skip

    # Hashing decides: SPLIT whether the person lands in or out, and the value is /flags'.
    for key in ("half", "ab"):
        expected = _split_ids(project, key)
        assert len(set(expected.values())) == 2, expected
        for distinct_id, value in expected.items():
            got = project.value(key, {"targetingKey": distinct_id})
            assert got["value"] == value and got["reason"] == "SPLIT", (key, distinct_id, got)
    # A person whose properties miss the condition is DEFAULT, not SPLIT.
    for i in range(10):
        got = project.value("half-of-pros", {"targetingKey": f"split-{i}", "plan": "free"})
        assert got["reason"] == "DEFAULT" and got["value"] is False
        got = project.value("half-of-pros", {"targetingKey": f"split-{i}", "plan": "pro"})
        assert got["reason"] == "SPLIT"


def test_values_variants_and_payloads(project: Project) -> None:
    project.flag("bool-payload", filters={**on(), "payloads": {"true": '{"a": 1}'}})
    project.flag(
        "multi",
        filters={**on(), "multivariate": variants(("blue", 100)), "payloads": {"blue": '"sky"'}},
    )
    project.flag(
        "multi-off",
        filters={**on(0), "multivariate": variants(("blue", 100)), "payloads": {"blue": '"x"'}},
    )
    project.visible("bool-payload", "multi", "multi-off")
    ctx = {"targetingKey": "payload-user"}
    assert project.value("bool-payload", ctx) == {
        "key": "bool-payload", "value": True, "reason": "TARGETING_MATCH", "variant": "true",
        "metadata": {"payload": '{"a": 1}'},
    }  # fmt: skip
    assert project.value("multi", ctx) == {
        "key": "multi", "value": "blue", "reason": "TARGETING_MATCH", "variant": "blue",
        "metadata": {"payload": '"sky"'},
    }  # fmt: skip
    assert project.value("multi-off", ctx) == {
        "key": "multi-off", "value": False, "reason": "SPLIT", "variant": "false",
    }  # fmt: skip


def test_stored_person_groups_and_cohorts_apply(project: Project) -> None:
    project.capture(
        {
            "event": "$identify",
            "distinct_id": "stored-pro",
            "properties": {"$set": {"plan": "pro"}},
        },
        {
            "event": "$groupidentify",
            "distinct_id": "stored-pro",
            "properties": {
                "$group_type": "company",
                "$group_key": "acme",
                "$group_set": {"tier": "gold"},
            },
        },
    )
    cohort = project.api.post(
        "/api/projects/@current/cohorts/",
        json={"name": "testers", "is_static": True, "distinct_ids": ["tester"]},
    ).json()
    gold = {"key": "tier", "value": "gold", "type": "group", "group_type_index": 0}
    project.flag("pro-only", filters=on(properties=[person("plan", "pro")]))
    project.flag(
        "gold-companies",
        filters={"aggregation_group_type_index": 0, "groups": [{"properties": [gold]}]},
    )
    project.flag(
        "testers",
        filters=on(properties=[{"key": "id", "value": cohort["id"], "type": "cohort"}]),
    )
    project.flag(
        "needs-pro",
        filters=on(properties=[{"key": "pro-only", "type": "flag", "value": True,
                                "operator": "flag_evaluates_to"}]),
    )  # fmt: skip
    project.visible("pro-only", "gold-companies", "testers", "needs-pro")

    stored = {"targetingKey": "stored-pro"}
    assert project.value("pro-only", stored)["value"] is True
    assert project.value("needs-pro", stored)["value"] is True
    assert project.value("pro-only", {**stored, "plan": "free"})["value"] is False  # overlay
    assert project.value("needs-pro", {"targetingKey": "nobody"})["value"] is False
    acme = {"targetingKey": "someone", "groups": {"company": "acme"}}
    assert project.value("gold-companies", acme)["value"] is True
    assert project.value("gold-companies", {"targetingKey": "someone"})["value"] is False
    assert project.value("testers", {"targetingKey": "tester"})["value"] is True
    assert project.value("testers", {"targetingKey": "other"})["value"] is False

    for distinct_id, extra in (("stored-pro", {}), ("someone", {"groups": {"company": "acme"}})):
        expected = project.flags(distinct_id, **extra)
        got = project.bulk({"targetingKey": distinct_id, **extra}).json()["flags"]
        assert {f["key"]: f["value"] for f in got} == expected


# bulk, ETag, 304 ---------------------------------------------------------------------------


def test_bulk_answer_etag_and_304(project: Project) -> None:
    project.flag("pro-only", filters=on(properties=[person("plan", "pro")]))
    flag = project.flag("everyone", filters={**on(), "payloads": {"true": "1"}})
    project.flag("multi", filters={**on(), "multivariate": variants(("blue", 100))})
    project.flag("switched-off", filters=on(), active=False)
    project.visible("pro-only", "everyone", "multi")
    ctx = {"targetingKey": "bulk-user"}

    r = project.bulk(ctx)
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"flags"}
    flags = {f["key"]: f for f in r.json()["flags"]}
    assert flags == {
        "pro-only": {"key": "pro-only", "value": False, "reason": "DEFAULT", "variant": "false"},
        "everyone": {"key": "everyone", "value": True, "reason": "TARGETING_MATCH",
                     "variant": "true", "metadata": {"payload": "1"}},
        "multi": {"key": "multi", "value": "blue", "reason": "TARGETING_MATCH", "variant": "blue"},
        "switched-off": {"key": "switched-off", "value": False, "reason": "DISABLED",
                         "variant": "false"},
    }  # fmt: skip
    etag = r.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"')
    assert "etag" in r.headers["access-control-expose-headers"].lower()

    again = project.bulk(ctx, **{"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == etag
    assert project.bulk(ctx, **{"If-None-Match": '"other", ' + etag}).status_code == 304
    assert project.bulk(ctx, **{"If-None-Match": '"other"'}).status_code == 200
    # another context, another answer: another ETag
    other = project.bulk({"targetingKey": "bulk-user", "plan": "pro"})
    assert other.headers["etag"] != etag

    # a definition change that changes this person's answer changes the ETag
    r = project.api.patch(
        f"/api/projects/@current/feature_flags/{flag['id']}/",
        json={"filters": {**on(), "payloads": {"true": "2"}}},
    )
    assert r.status_code == 200, r.text
    project.eventually(
        lambda: project.bulk(ctx, **{"If-None-Match": etag}).status_code == 200,
        "a new ETag after the flag change",
    )
    changed = project.bulk(ctx)
    assert {f["key"]: f for f in changed.json()["flags"]}["everyone"]["metadata"] == {
        "payload": "2"
    }
    etag = changed.headers["etag"]

    # the person's $set changes an answer, so the ETag
    project.capture(
        {"event": "$set", "distinct_id": "bulk-user", "properties": {"$set": {"plan": "pro"}}}
    )
    project.eventually(
        lambda: project.bulk(ctx, **{"If-None-Match": etag}).status_code == 200,
        "a new ETag after the person's $set",
    )
    flags = {f["key"]: f for f in project.bulk(ctx).json()["flags"]}
    assert flags["pro-only"]["value"] is True


def test_bulk_matches_flags_for_many_persons(project: Project) -> None:
    project.flag("half", filters=on(50))
    project.flag("ab", filters={**on(), "multivariate": variants(("a", 30), ("b", 70))})
    project.flag("pro-only", filters=on(properties=[person("plan", "pro")]))
    project.visible("half", "ab", "pro-only")
    for i in range(30):
        props = {"plan": "pro"} if i % 3 == 0 else {}
        expected = project.flags(f"many-{i}", person_properties=props)
        got = project.bulk({"targetingKey": f"many-{i}", **props}).json()["flags"]
        assert {f["key"]: f["value"] for f in got} == expected


# configuration, metrics, quota --------------------------------------------------------------


def test_configuration(project: Project) -> None:
    r = project.http.get("/ofrep/v1/configuration", headers=project.auth())
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["name"] == "Flagstaff"
    polling = body["capabilities"]["cacheInvalidation"]["polling"]
    assert polling["enabled"] is True and polling["minPollingIntervalMs"] > 0
    assert body["capabilities"]["flagEvaluation"]["supportedTypes"] == ["boolean", "string"]
    again = project.http.get(
        "/ofrep/v1/configuration",
        headers={"X-API-Key": project.token, "If-None-Match": r.headers["etag"]},
    )
    assert again.status_code == 304


def _flag_requests(http: httpx.Client) -> int:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("flagstaff_flag_requests_total "):
            return int(float(line.split()[1]))
    raise AssertionError("no flagstaff_flag_requests_total")


def test_counted_as_flag_requests(project: Project) -> None:
    project.flag("counted", filters=on())
    project.visible("counted")
    before = _flag_requests(project.http)
    project.value("counted", {"targetingKey": "c"})
    assert project.bulk({"targetingKey": "c"}).status_code == 200
    project.eventually(
        lambda: _flag_requests(project.http) >= before + 2, "two more flag requests counted"
    )


@pytest.fixture
def limited_server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(data_dir=tmp_path / "data", env={"FLAGSTAFF_FLAG_QUOTA_PER_MINUTE": "2"}).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_flag_quota_answers_429(limited_server: Server) -> None:
    Api(limited_server.url).create_flag(key="quota-flag", filters=on())
    seconds_into_minute = time.time() % 60
    if seconds_into_minute > 55:  # the quota window is the calendar minute
        time.sleep(60.5 - seconds_into_minute)
    auth = {"Authorization": f"Bearer {PROJECT_TOKEN}"}
    ctx = {"context": {"targetingKey": "q"}}
    with httpx.Client(base_url=limited_server.url, timeout=30.0) as client:
        first = client.post(SINGLE.format("quota-flag"), json=ctx, headers=auth)
        assert first.status_code == 200 and first.json()["value"] is True
        assert client.post(BULK, json=ctx, headers=auth).status_code == 200
        third = client.post(SINGLE.format("quota-flag"), json=ctx, headers=auth)
        assert_failure(third, 429, "GENERAL", "quota-flag")
        assert 0 < int(third.headers["retry-after"]) <= 60
        assert_failure(client.post(BULK, json=ctx, headers=auth), 429, "GENERAL", None)
        # /flags shares the quota
        over = client.post("/flags?v=2", json={"api_key": PROJECT_TOKEN, "distinct_id": "q"})
        assert over.json()["quotaLimited"] == ["feature_flags"]


# flag usage and experiment exposures ------------------------------------------------------


def test_reads_of_one_flag_count_for_usage_and_exposures_once(project: Project) -> None:
    """A single-flag evaluation is a read, recorded as $feature_flag_called once per person and
    value (as the PostHog SDKs send it); a bulk evaluation is a prefetch and records nothing."""
    r = project.api.post(
        "/api/projects/@current/experiments/",
        json={"name": "OFREP test", "feature_flag_key": "ofrep-exp",
              "start_date": "2024-01-01T00:00:00Z"},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    experiment = r.json()["id"]
    project.visible("ofrep-exp")
    flag_id = project.api.get(f"/flags/definitions?token={project.token}").json()["flags"][0]["id"]
    persons = [f"exp-{i}" for i in range(12)]
    expected: dict[str, int] = {}
    for distinct_id in persons:
        variant = project.flags(distinct_id)["ofrep-exp"]
        expected[variant] = expected.get(variant, 0) + 1
        assert project.value("ofrep-exp", {"targetingKey": distinct_id})["value"] == variant
    assert len(expected) == 2, expected

    def exposures() -> dict[str, int]:
        r = project.api.get(f"/api/projects/@current/experiments/{experiment}/results/")
        assert r.status_code == 200, r.text
        return dict(r.json()["exposures"])

    def usage() -> dict[str, Any]:
        r = project.api.get(f"/api/projects/@current/feature_flags/{flag_id}/usage/")
        assert r.status_code == 200, r.text
        return dict(r.json())

    assert exposures() == expected
    assert usage()["total"] == len(persons) and usage()["values"] == expected
    for distinct_id in persons:  # read again: already recorded
        project.value("ofrep-exp", {"targetingKey": distinct_id})
    for i in range(5):  # bulk evaluations of new persons: not reads
        assert project.bulk({"targetingKey": f"bulk-{i}"}).status_code == 200
    assert exposures() == expected
    assert usage()["total"] == len(persons)


def test_openapi_documents_the_ofrep_routes(http: httpx.Client) -> None:
    schema = http.get("/api/schema/").json()
    single = schema["paths"]["/ofrep/v1/evaluate/flags/{key}"]["post"]
    bulk = schema["paths"]["/ofrep/v1/evaluate/flags"]["post"]
    config = schema["paths"]["/ofrep/v1/configuration"]["get"]
    for op in (single, bulk, config):
        assert op["security"] == [{"ProjectToken": []}, {"ProjectTokenHeader": []}]
        failure = op["responses"]["401"]["content"]["application/json"]["schema"]
        assert failure == {"$ref": "#/components/schemas/OfrepFailure"}
    assert {"200", "400", "401", "404", "429", "500"} <= set(single["responses"])
    assert "304" in bulk["responses"] and "304" in config["responses"]
    assert schema["components"]["securitySchemes"]["ProjectTokenHeader"]["name"] == "X-API-Key"


def test_evaluation_runtime_applies_as_on_flags(project: Project) -> None:
    """A flag for another runtime is left out, as /flags leaves it out: not found alone."""
    project.flag("client-only", evaluation_runtime="client", filters=on())
    project.flag("server-only", evaluation_runtime="server", filters=on())
    project.visible("client-only", "server-only")
    ctx = {"targetingKey": "runtime-user"}
    server = {**project.auth(), "User-Agent": "python-requests/2.32.3"}
    browser = {**project.auth(), "Origin": "https://shop.example"}
    for headers, present, absent in ((server, "server-only", "client-only"),
                                     (browser, "client-only", "server-only")):  # fmt: skip
        r = project.http.post(SINGLE.format(present), json={"context": ctx}, headers=headers)
        assert r.status_code == 200 and r.json()["value"] is True, r.text
        r = project.http.post(SINGLE.format(absent), json={"context": ctx}, headers=headers)
        assert_failure(r, 404, "FLAG_NOT_FOUND", absent)
        bulk = project.http.post(BULK, json={"context": ctx}, headers=headers).json()["flags"]
        assert [f["key"] for f in bulk] == [present]
