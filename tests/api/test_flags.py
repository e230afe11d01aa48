"""POST /flags over real HTTP: response shapes, targeting data, filters, bodies, quota, freshness.

Each test works in a project of its own (``POST /api/projects/``), so flag keys can be the
fixed ones whose buckets are known, and no other test's flags show up in the answers.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import msgspec
import pytest

from tests.server import PROJECT_TOKEN, Api, Server

V2_REASON_KEYS = {"code", "condition_index", "description"}


@dataclass
class Project:
    token: str
    api: Api
    http: httpx.Client

    def flag(self, key: str, **fields: Any) -> dict[str, Any]:
        return self.api.create_flag(key=key, **fields)

    def cohort(self, **fields: Any) -> dict[str, Any]:
        r = self.api.post("/api/projects/@current/cohorts/", json=fields)
        assert r.status_code == 201, r.text
        return r.json()

    def post_flags(
        self, distinct_id: str = "user-1", *, path: str = "/flags?v=2", **body: Any
    ) -> httpx.Response:
        return self.http.post(
            path, json={"api_key": self.token, "distinct_id": distinct_id, **body}
        )

    def flags(self, distinct_id: str = "user-1", **body: Any) -> dict[str, Any]:
        r = self.post_flags(distinct_id, **body)
        assert r.status_code == 200, r.text
        return r.json()

    def values(self, distinct_id: str = "user-1", **body: Any) -> dict[str, Any]:
        """``{key: variant or enabled}`` from a v2 answer."""
        flags = self.flags(distinct_id, **body)["flags"]
        return {k: f.get("variant", f["enabled"]) for k, f in flags.items()}

    def capture(self, *events: dict[str, Any]) -> None:
        r = self.http.post("/batch/", json={"api_key": self.token, "batch": list(events)})
        assert r.status_code == 200, r.text

    def wait_visible(self, *keys: str, timeout: float = 2.0) -> None:
        """Flag changes reach the workers' definitions cache (which /flags and the
        definitions endpoint share) after the refresh interval."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.api.get(f"/flags/definitions?token={self.token}")
            assert r.status_code == 200, r.text
            seen = {flag["key"] for flag in r.json()["flags"]}
            if set(keys) <= seen:
                return
            assert time.monotonic() < deadline, f"{set(keys) - seen} never became visible"
            time.sleep(0.05)


@pytest.fixture
def project(server: Server, api: Api, http: httpx.Client) -> Iterator[Project]:
    r = api.post("/api/projects/", json={"name": f"flags-{uuid.uuid4().hex[:8]}"})
    assert r.status_code == 201, r.text
    body = r.json()
    own_api = Api(server.url, body["personal_api_key"])
    try:
        yield Project(body["api_token"], own_api, http)
    finally:
        own_api.client.close()


def on(rollout: float | None = 100, **condition: Any) -> dict[str, Any]:
    """Filters with a single condition set."""
    return {"groups": [{"properties": [], "rollout_percentage": rollout, **condition}]}


def person(key: str, value: Any, operator: str = "exact") -> dict[str, Any]:
    return {"key": key, "value": value, "operator": operator, "type": "person"}


def variants(*pairs: tuple[str, int]) -> dict[str, Any]:
    return {"variants": [{"key": k, "rollout_percentage": p} for k, p in pairs]}


# shapes ------------------------------------------------------------------------------------


@pytest.fixture
def shaped(project: Project) -> Project:
    project.flag("bool-on", filters={**on(), "payloads": {"true": '{"a": 1}'}})
    project.flag(
        "multi",
        filters={**on(), "multivariate": variants(("only", 100)), "payloads": {"only": '"v"'}},
    )
    project.flag("bool-off", filters=on(0))
    project.wait_visible("bool-on", "multi", "bool-off")
    return project


@pytest.mark.parametrize(
    "path", ["/flags?v=2", "/flags/?v=2", "/decide/?v=4", "/decide?v=5", "/flags/?v=4"]
)
def test_v2_shape(shaped: Project, path: str) -> None:
    body = shaped.flags(path=path)
    assert set(body) == {"flags", "errorsWhileComputingFlags", "requestId", "evaluatedAt"}
    assert body["errorsWhileComputingFlags"] is False
    assert str(uuid.UUID(body["requestId"])) == body["requestId"]
    assert abs(body["evaluatedAt"] - time.time() * 1000) < 60_000
    flags = body["flags"]
    assert set(flags) == {"bool-on", "multi", "bool-off"}
    for key, flag in flags.items():
        assert flag["key"] == key
        assert set(flag["reason"]) == V2_REASON_KEYS
        assert {"id", "version", "description"} <= set(flag["metadata"])
        assert isinstance(flag["metadata"]["id"], int)
        assert flag["metadata"]["version"] == 1

    assert flags["bool-on"]["enabled"] is True
    assert "variant" not in flags["bool-on"]
    assert flags["bool-on"]["reason"] == {
        "code": "condition_match",
        "condition_index": 0,
        "description": "Matched condition set 1",
    }
    assert flags["bool-on"]["metadata"]["payload"] == '{"a": 1}'

    assert flags["multi"]["enabled"] is True
    assert flags["multi"]["variant"] == "only"
    assert flags["multi"]["metadata"]["payload"] == '"v"'

    assert flags["bool-off"]["enabled"] is False
    assert "variant" not in flags["bool-off"]
    assert "payload" not in flags["bool-off"]["metadata"]
    assert flags["bool-off"]["reason"] == {
        "code": "out_of_rollout_bound",
        "condition_index": 0,
        "description": "Out of rollout bound",
    }


@pytest.mark.parametrize("path", ["/flags", "/flags/?v=1", "/decide/?v=3", "/decide/?v=2"])
def test_legacy_shape(shaped: Project, path: str) -> None:
    body = shaped.flags(path=path)
    assert set(body) == {
        "featureFlags",
        "featureFlagPayloads",
        "errorsWhileComputingFlags",
        "requestId",
    }
    assert body["featureFlags"] == {"bool-on": True, "multi": "only", "bool-off": False}
    assert body["featureFlagPayloads"] == {"bool-on": '{"a": 1}', "multi": '"v"'}
    assert body["errorsWhileComputingFlags"] is False
    uuid.UUID(body["requestId"])


@pytest.mark.parametrize("path", ["/flags/?v=2&config=true", "/flags?config=true"])
def test_config_true_adds_client_configuration(shaped: Project, path: str) -> None:
    body = shaped.flags(path=path)
    assert isinstance(body["config"]["enable_collect_everything"], bool)
    assert body["toolbarParams"] == {}
    assert body["isAuthenticated"] is False
    assert {"gzip", "gzip-js"} <= set(body["supportedCompression"])
    assert ("flags" in body) == ("v=2" in path)
    plain = shaped.flags(path=path.replace("config=true", "config=false"))
    assert not {"config", "toolbarParams", "isAuthenticated", "supportedCompression"} & set(plain)


# buckets -----------------------------------------------------------------------------------


def test_compat_bucket_vectors(project: Project) -> None:
    """compat.md s2: the same users land in the same buckets as on PostHog."""
    project.flag("simple-flag", filters=on(45))
    project.flag(
        "multivariate-flag",
        filters={
            **on(55),
            "multivariate": variants(
                ("first-variant", 50),
                ("second-variant", 20),
                ("third-variant", 20),
                ("fourth-variant", 5),
                ("fifth-variant", 5),
            ),
        },
    )
    project.wait_visible("simple-flag", "multivariate-flag")
    simple = [c == "T" for c in "FTTFTFFTFT"]
    multi: list[Any] = ["second", "second", "first", False, False, "second", "first"]
    multi += [False, False, False]
    for i in range(10):
        got = project.values(f"distinct_id_{i}")
        expected = multi[i] if multi[i] is False else f"{multi[i]}-variant"
        assert got == {"simple-flag": simple[i], "multivariate-flag": expected}, i


# targeting data ----------------------------------------------------------------------------


def test_stored_person_properties_and_request_override(project: Project) -> None:
    project.capture(
        {"event": "$identify", "distinct_id": "stored-pro", "properties": {"$set": {"plan": "pro"}}}
    )
    project.flag("pro-only", filters=on(properties=[person("plan", "pro")]))
    project.wait_visible("pro-only")
    assert project.values("stored-pro") == {"pro-only": True}
    assert project.values("stored-pro", person_properties={"plan": "free"}) == {"pro-only": False}
    assert project.values("nobody") == {"pro-only": False}
    assert project.values("nobody", person_properties={"plan": "PRO"}) == {"pro-only": True}
    # distinct_id is a person property of its own
    project.flag("by-id", filters=on(properties=[person("distinct_id", "stored-pro")]))
    project.wait_visible("by-id")
    assert project.values("stored-pro", flag_keys_to_evaluate=["by-id"]) == {"by-id": True}


def test_group_properties_stored_and_overridden(project: Project) -> None:
    project.capture(
        {
            "event": "$groupidentify",
            "distinct_id": "member",
            "properties": {
                "$group_type": "company",
                "$group_key": "acme",
                "$group_set": {"tier": "gold"},
            },
        }
    )
    gold = {"key": "tier", "value": "gold", "type": "group", "group_type_index": 0}
    project.flag(
        "gold-companies",
        filters={
            "aggregation_group_type_index": 0,
            "groups": [{"properties": [gold], "rollout_percentage": 100}],
        },
    )
    project.wait_visible("gold-companies")

    def value(**body: Any) -> Any:
        return project.flags("member", **body)["flags"]["gold-companies"]

    assert value(groups={"company": "acme"})["enabled"] is True
    assert value(groups={"company": "other"})["enabled"] is False
    assert value(groups={"company": "other"}, group_properties={"company": {"tier": "gold"}})[
        "enabled"
    ]
    overridden = value(groups={"company": "acme"}, group_properties={"company": {"tier": "tin"}})
    assert overridden["enabled"] is False
    no_group = value()
    assert no_group["enabled"] is False
    assert no_group["reason"]["code"] == "no_group_type"


def test_static_cohort_membership(project: Project) -> None:
    cohort = project.cohort(name="beta testers", is_static=True, distinct_ids=["tester-1"])
    cohort_filter = {"key": "id", "value": cohort["id"], "type": "cohort", "operator": "in"}
    project.flag("beta", filters=on(properties=[cohort_filter]))
    project.wait_visible("beta")
    assert project.values("tester-1") == {"beta": True}
    assert project.values("tester-2") == {"beta": False}
    r = project.api.patch(
        f"/api/projects/@current/cohorts/{cohort['id']}/add_persons_to_static_cohort/",
        json={"distinct_ids": ["tester-2"]},
    )
    assert r.status_code == 200, r.text
    assert project.values("tester-2") == {"beta": True}
    r = project.api.patch(
        f"/api/projects/@current/cohorts/{cohort['id']}/remove_person_from_static_cohort/",
        json={"distinct_ids": ["tester-1"]},
    )
    assert r.status_code == 200, r.text
    assert project.values("tester-1") == {"beta": False}


def test_dynamic_cohort(project: Project) -> None:
    corp = person("email", "@corp.example", "icontains")
    cohort = project.cohort(
        name="staff",
        filters={"properties": {"type": "OR", "values": [{"type": "AND", "values": [corp]}]}},
    )
    project.flag(
        "staff-only",
        filters=on(properties=[{"key": "id", "value": cohort["id"], "type": "cohort"}]),
    )
    project.capture(
        {
            "event": "$identify",
            "distinct_id": "employee",
            "properties": {"$set": {"email": "Ann@Corp.Example"}},
        }
    )
    project.wait_visible("staff-only")
    assert project.values("employee") == {"staff-only": True}
    assert project.values("guest", person_properties={"email": "x@corp.example"}) == {
        "staff-only": True
    }
    assert project.values("guest", person_properties={"email": "x@else.example"}) == {
        "staff-only": False
    }


# which flags are evaluated -----------------------------------------------------------------


def test_evaluation_contexts(project: Project) -> None:
    project.flag("web", evaluation_contexts=["web"], filters=on())
    project.flag("mobile", evaluation_tags=["mobile", "app"], filters=on())
    project.flag("untagged", filters=on())
    project.wait_visible("web", "mobile", "untagged")
    assert set(project.values()) == {"web", "mobile", "untagged"}
    assert set(project.values(evaluation_contexts=["web"])) == {"web", "untagged"}
    assert set(project.values(evaluation_environments=["app"])) == {"mobile", "untagged"}
    assert set(project.values(evaluation_contexts=["web", "mobile"])) == {
        "web",
        "mobile",
        "untagged",
    }
    assert set(project.values(evaluation_contexts=["tv"])) == {"untagged"}


@pytest.fixture
def runtimes(project: Project) -> Project:
    project.flag("server-only", evaluation_runtime="server", filters=on())
    project.flag("client-only", evaluation_runtime="client", filters=on())
    project.flag("everywhere", evaluation_runtime="all", filters=on())
    project.flag("unset", evaluation_runtime=None, filters=on())
    project.flag(
        "web-client", evaluation_runtime="client", evaluation_contexts=["web"], filters=on()
    )
    project.wait_visible("server-only", "client-only", "everywhere", "unset")
    return project


SERVER_SET = {"server-only", "everywhere", "unset"}
CLIENT_SET = {"client-only", "web-client", "everywhere", "unset"}
UNKNOWN_SET = {"everywhere", "unset"}
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({}, {}, UNKNOWN_SET),
        ({"User-Agent": "posthog-python/7.91.1"}, {}, SERVER_SET),
        ({"User-Agent": "posthog-node/5.70.0"}, {}, SERVER_SET),
        ({"User-Agent": "curl/8.5.0"}, {}, SERVER_SET),
        ({"User-Agent": FIREFOX}, {}, CLIENT_SET),
        ({"User-Agent": "posthog-android/3.1.0"}, {}, CLIENT_SET),
        ({"Origin": "https://shop.example"}, {}, CLIENT_SET),
        ({"Referer": "https://shop.example/cart"}, {}, CLIENT_SET),
        ({"Sec-Fetch-Mode": "cors"}, {}, CLIENT_SET),
        ({"Sec-Fetch-Site": "cross-site"}, {}, CLIENT_SET),
        ({}, {"evaluation_runtime": "server"}, SERVER_SET),
        ({}, {"evaluation_runtime": "client"}, CLIENT_SET),
        ({"User-Agent": FIREFOX}, {"evaluation_runtime": "server"}, SERVER_SET),
        ({"User-Agent": "posthog-python/7.91.1", "Origin": "https://x.example"}, {}, SERVER_SET),
        ({"User-Agent": "something-else/1.0"}, {}, UNKNOWN_SET),
    ],
)
def test_runtime_filtering(
    runtimes: Project, headers: dict[str, str], body: dict[str, Any], expected: set[str]
) -> None:
    r = runtimes.http.post(
        "/flags?v=2",
        json={"api_key": runtimes.token, "distinct_id": "rt", **body},
        headers={"User-Agent": "python-httpx", **headers},
    )
    assert r.status_code == 200, r.text
    assert set(r.json()["flags"]) == expected


def test_context_and_runtime_filters_apply_in_sequence(runtimes: Project) -> None:
    def keys(runtime: str, contexts: list[str]) -> set[str]:
        values = runtimes.values("rt", evaluation_runtime=runtime, evaluation_contexts=contexts)
        return set(values)

    assert keys("client", ["web"]) == CLIENT_SET
    assert keys("server", ["web"]) == SERVER_SET
    assert keys("client", ["tv"]) == CLIENT_SET - {"web-client"}


def test_flag_keys_to_evaluate_and_disable_flags(shaped: Project) -> None:
    assert set(shaped.values(flag_keys_to_evaluate=["multi", "missing"])) == {"multi"}
    disabled = shaped.flags(disable_flags=True)
    assert disabled["flags"] == {}
    assert disabled["errorsWhileComputingFlags"] is False
    assert "quotaLimited" not in disabled
    legacy = shaped.post_flags(path="/flags", disable_flags=True).json()
    assert legacy["featureFlags"] == {}


# values ------------------------------------------------------------------------------------


def test_payloads_boolean_and_per_variant(project: Project) -> None:
    project.flag(
        "themed",
        filters={
            "groups": [
                {"properties": [person("plan", "a")], "rollout_percentage": 100, "variant": "a"},
                {"properties": [person("plan", "b")], "rollout_percentage": 100, "variant": "b"},
            ],
            "multivariate": variants(("a", 50), ("b", 50)),
            "payloads": {"a": '{"theme": "dark"}'},
        },
    )
    project.flag("banner", filters={**on(), "payloads": {"true": '"hello"'}})
    project.wait_visible("themed", "banner")

    got = project.flags(person_properties={"plan": "a"})["flags"]
    assert got["themed"]["variant"] == "a"
    assert got["themed"]["metadata"]["payload"] == '{"theme": "dark"}'
    assert got["banner"]["metadata"]["payload"] == '"hello"'
    got = project.flags(person_properties={"plan": "b"})["flags"]
    assert got["themed"]["variant"] == "b"
    assert "payload" not in got["themed"]["metadata"]
    assert got["themed"]["reason"]["condition_index"] == 1
    got = project.flags(person_properties={"plan": "c"})["flags"]
    assert got["themed"]["enabled"] is False
    assert "payload" not in got["themed"]["metadata"]
    legacy = project.post_flags(path="/flags", person_properties={"plan": "a"}).json()
    assert legacy["featureFlagPayloads"] == {"themed": '{"theme": "dark"}', "banner": '"hello"'}


def test_holdout_variant(project: Project) -> None:
    project.flag(
        "experiment",
        filters={
            **on(),
            "multivariate": variants(("control", 50), ("test", 50)),
            "holdout": {"id": 42, "exclusion_percentage": 100},
        },
    )
    project.flag(
        "no-holdout",
        filters={
            **on(),
            "multivariate": variants(("control", 100)),
            "holdout": {"id": 43, "exclusion_percentage": 0},
        },
    )
    project.wait_visible("experiment", "no-holdout")
    flags = project.flags("held-out")["flags"]
    assert flags["experiment"]["enabled"] is True
    assert flags["experiment"]["variant"] == "holdout-42"
    assert flags["experiment"]["reason"]["code"] == "holdout_condition_value"
    assert flags["no-holdout"]["variant"] == "control"


def variant_for(flag_key: str, identifier: str, names: tuple[str, str]) -> str:
    """PostHog's variant hash (compat.md s2) for a 50/50 flag, to pick ids in known buckets."""
    digest = hashlib.sha1(f"{flag_key}.{identifier}variant".encode()).hexdigest()
    return names[0] if int(digest[:15], 16) / 0xFFFFFFFFFFFFFFF < 0.5 else names[1]


def first_id(prefix: str, wanted: dict[str, str]) -> str:
    """The first ``prefix-N`` whose variant is ``wanted[flag key]`` for every flag given."""
    names = {"sticky": ("control", "test"), "plain": ("x", "y")}
    return next(
        f"{prefix}-{i}"
        for i in range(1000)
        if all(variant_for(k, f"{prefix}-{i}", names[k]) == v for k, v in wanted.items())
    )


def test_experience_continuity_survives_identify(project: Project) -> None:
    split = {**on(), "multivariate": variants(("control", 50), ("test", 50))}
    project.flag("sticky", ensure_experience_continuity=True, filters=split)
    project.flag("plain", filters={**on(), "multivariate": variants(("x", 50), ("y", 50))})
    anon = first_id("anon", {"sticky": "control", "plain": "x"})
    user = first_id("user", {"sticky": "test", "plain": "y"})
    project.wait_visible("sticky", "plain")

    # The anonymous visitor exists as a person; the identified id does not yet.
    project.capture({"event": "$pageview", "distinct_id": anon, "properties": {}})
    assert project.values(anon) == {"sticky": "control", "plain": "x"}
    assert project.values(user) == {"sticky": "test", "plain": "y"}

    # identify() makes posthog-js reload flags with $anon_distinct_id ...
    assert project.values(user, **{"$anon_distinct_id": anon}) == {
        "sticky": "control",
        "plain": "y",
    }
    # ... and send $identify, which merges the anonymous person into the identified one.
    r = project.http.post(
        "/e/",
        json={
            "api_key": project.token,
            "event": "$identify",
            "distinct_id": user,
            "properties": {"$anon_distinct_id": anon},
        },
    )
    assert r.status_code == 200, r.text
    assert project.values(user) == {"sticky": "control", "plain": "y"}
    # The first stored hash key wins: a later anonymous id does not move the user.
    other_anon = first_id("anon", {"sticky": "test"})
    assert project.values(user, **{"$anon_distinct_id": other_anon})["sticky"] == "control"


def test_experience_continuity_for_an_existing_person(project: Project) -> None:
    split = {**on(), "multivariate": variants(("control", 50), ("test", 50))}
    project.flag("sticky", ensure_experience_continuity=True, filters=split)
    anon = first_id("anon", {"sticky": "test"})
    user = first_id("user", {"sticky": "control"})
    project.capture({"event": "$pageview", "distinct_id": user, "properties": {}})
    project.wait_visible("sticky")
    assert project.values(user, **{"$anon_distinct_id": anon}) == {"sticky": "test"}
    assert project.values(user) == {"sticky": "test"}
    # Without a stored person for either id there is nothing to keep: plain bucketing.
    stranger = first_id("stranger", {"sticky": "control"})
    assert project.values(stranger, **{"$anon_distinct_id": "anon-ghost"}) == {"sticky": "control"}


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({"X-Forwarded-For": "8.8.8.8"}, {}, True),
        ({"X-Forwarded-For": "8.8.8.8, 10.0.0.1"}, {}, True),
        ({"HTTP_X_FORWARDED_FOR": "8.8.8.8"}, {}, True),
        ({}, {}, False),
        ({"X-Forwarded-For": "8.8.8.8"}, {"geoip_disable": True}, False),
        (
            {"X-Forwarded-For": "8.8.8.8"},
            {"person_properties": {"$geoip_country_code": "GB"}},
            False,
        ),
        ({}, {"person_properties": {"$geoip_country_code": "US"}}, True),
    ],
)
def test_geoip(
    project: Project, headers: dict[str, str], body: dict[str, Any], expected: bool
) -> None:
    project.flag("us-only", filters=on(properties=[person("$geoip_country_code", "US")]))
    project.wait_visible("us-only")
    r = project.http.post(
        "/flags?v=2",
        json={"api_key": project.token, "distinct_id": "traveller", **body},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["flags"]["us-only"]["enabled"] is expected


# bodies and errors -------------------------------------------------------------------------


def _body(project: Project) -> bytes:
    return msgspec.json.encode({"token": project.token, "distinct_id": "packed"})


def test_gzip_body_recognised_by_magic_bytes(shaped: Project) -> None:
    r = shaped.http.post(
        "/flags/?v=2",
        content=gzip.compress(_body(shaped)),
        headers={"Content-Type": "text/plain"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["flags"]["bool-on"]["enabled"] is True
    r = shaped.http.post(
        "/flags/?v=2&compression=gzip-js",
        content=gzip.compress(_body(shaped)),
        headers={"Content-Type": "text/plain"},
    )
    assert r.status_code == 200, r.text


def test_base64_form_body(shaped: Project) -> None:
    data = quote(base64.b64encode(_body(shaped)).decode())
    r = shaped.http.post(
        "/flags/?v=2&compression=base64",
        content=f"data={data}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200, r.text
    assert set(r.json()["flags"]) == {"bool-on", "multi", "bool-off"}


@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        (b'{"api_key": "phc_nosuchproject000000000000", "distinct_id": "a"}', 401, None),
        (b'{"distinct_id": "a"}', 401, None),
        (b'{"api_key": "%TOKEN%"}', 400, "missing_distinct_id"),
        (b'{"api_key": "%TOKEN%", "distinct_id": null}', 400, "missing_distinct_id"),
        (b'{"api_key": "%TOKEN%", "distinct_id": "a"', 400, None),
        (b"[1, 2]", 400, None),
    ],
)
def test_errors_are_json(http: httpx.Client, content: bytes, status: int, code: str | None) -> None:
    r = http.post(
        "/flags/?v=2",
        content=content.replace(b"%TOKEN%", PROJECT_TOKEN.encode()),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()
    assert isinstance(error["detail"], str) and error["detail"]
    if code is not None:
        assert error["code"] == code


def test_long_distinct_id_is_cut_to_200_characters(project: Project) -> None:
    project.flag("exact-id", filters=on(properties=[person("distinct_id", "x" * 200)]))
    project.wait_visible("exact-id")
    assert project.values("x" * 250) == {"exact-id": True}


# what PostHog's server accepts (issue 13) --------------------------------------------------


def rollout_miss(percentage: float, *flag_keys: str) -> str:
    """A distinct id whose rollout bucket is outside ``percentage`` for every flag key."""
    return next(
        f"user-{n}"
        for n in range(10_000)
        if all(_bucket(f"{key}.user-{n}") > percentage / 100 for key in flag_keys)
    )


def _bucket(text: str) -> float:
    return int(hashlib.sha1(text.encode()).hexdigest()[:15], 16) / 0xFFFFFFFFFFFFFFF


def test_look_around_and_back_reference_patterns(project: Project) -> None:
    project.flag("no-bar", filters=on(properties=[person("path", "foo(?!bar)", "regex")]))
    project.flag("twice", filters=on(properties=[person("code", "^(\\w+)-\\1$", "regex")]))
    project.wait_visible("no-bar", "twice")
    assert project.values(person_properties={"path": "/foobaz", "code": "ab-ab"}) == {
        "no-bar": True,
        "twice": True,
    }
    assert project.values(person_properties={"path": "/foobar", "code": "ab-cd"}) == {
        "no-bar": False,
        "twice": False,
    }


def test_pathological_patterns_and_huge_values_are_answered(project: Project) -> None:
    project.flag("catastrophic", filters=on(properties=[person("p", "^(a+)+(?=b)c$", "regex")]))
    project.flag("bounded", filters=on(properties=[person("big", "a.{500}b", "regex")]))
    project.flag("not-bounded", filters=on(properties=[person("big", "a.{500}b", "not_regex")]))
    project.wait_visible("catastrophic", "bounded", "not-bounded")
    answer = project.flags(person_properties={"p": "a" * 5000 + "!", "big": "ac" * (1 << 19)})
    assert answer["errorsWhileComputingFlags"] is False
    # Over their budget, neither regex nor not_regex matches.
    for key in ("catastrophic", "bounded", "not-bounded"):
        assert answer["flags"][key]["enabled"] is False, key
        assert answer["flags"][key]["reason"]["code"] == "no_condition_match"
    small = project.values(person_properties={"big": "a" + "x" * 500 + "b"})
    assert small["bounded"] is True and small["not-bounded"] is False


def test_non_numeric_comparisons_are_stored_and_never_match(project: Project) -> None:
    for operator in ("gt", "gte", "lt", "lte"):
        project.flag(f"plan-{operator}", filters=on(properties=[person("plan", "pro", operator)]))
    project.wait_visible("plan-gt", "plan-gte", "plan-lt", "plan-lte")
    for plan in ("pro", "zzz", "aaa", 7):
        values = project.values(person_properties={"plan": plan})
        assert set(values.values()) == {False}, (plan, values)


def test_semver_reads_versions_as_the_server(project: Project) -> None:
    project.flag("exact-version", filters=on(properties=[person("v", "1.2.3", "semver_eq")]))
    project.flag("before-1", filters=on(properties=[person("v", "1.0.0", "semver_lt")]))
    project.flag("four-parts", filters=on(properties=[person("v", "1.2.3.4", "semver_eq")]))
    project.wait_visible("exact-version", "before-1", "four-parts")
    for not_a_version in ("1.2.3.4", "1..2.3", "1.2.3."):
        values = project.values(person_properties={"v": not_a_version})
        assert values == {"exact-version": False, "before-1": False, "four-parts": False}
    assert project.values(person_properties={"v": "1.0.0-rc.1"})["before-1"] is True
    assert project.values(person_properties={"v": "1.2.3-rc.1"})["exact-version"] is False
    assert project.values(person_properties={"v": "01.02.03"})["exact-version"] is True


def test_early_exit(project: Project) -> None:
    pro = [person("plan", "pro")]
    conditions = [
        {"properties": pro, "rollout_percentage": 10},
        {"properties": [], "rollout_percentage": 100},
    ]
    project.flag("stops", filters={"groups": conditions, "early_exit": True})
    project.flag("goes-on", filters={"groups": conditions})
    project.wait_visible("stops", "goes-on")
    who = rollout_miss(10, "stops", "goes-on")
    flags = project.flags(who, person_properties={"plan": "pro"})["flags"]
    assert flags["stops"]["enabled"] is False
    assert flags["stops"]["reason"] == {
        "code": "out_of_rollout_bound",
        "condition_index": 0,
        "description": "Out of rollout bound",
    }
    # Without early_exit the second condition set decides.
    assert flags["goes-on"]["enabled"] is True
    assert flags["goes-on"]["reason"]["condition_index"] == 1
    free = project.flags(who, person_properties={"plan": "free"})["flags"]["stops"]
    assert free["enabled"] is True and free["reason"]["condition_index"] == 1


def test_an_empty_distinct_id_is_answered(project: Project) -> None:
    project.flag("one-percent", filters=on(1))
    project.flag("split", filters={**on(), "multivariate": variants(("first", 50), ("second", 50))})
    project.wait_visible("one-percent", "split")
    answer = project.flags("")
    assert answer["errorsWhileComputingFlags"] is False
    # The empty id hashes to 0.0: inside every positive rollout, in the first variant.
    assert answer["flags"]["one-percent"]["enabled"] is True
    assert answer["flags"]["split"]["variant"] == "first"
    legacy = project.post_flags("", path="/flags")
    assert legacy.status_code == 200, legacy.text
    missing = project.http.post("/flags?v=2", json={"api_key": project.token})
    assert missing.status_code == 400
    assert missing.json()["code"] == "missing_distinct_id"


def test_flags_in_a_dependency_cycle_are_left_out(project: Project) -> None:
    ping = project.flag("ping", filters=on())
    pong = project.flag("pong", filters=on())

    def depends_on(flag_id: int) -> dict[str, Any]:
        dependency = {
            "key": str(flag_id),
            "type": "flag",
            "value": True,
            "operator": "flag_evaluates_to",
        }
        return on(properties=[dependency])

    for flag, other in ((ping, pong), (pong, ping)):
        r = project.api.patch(
            f"/api/projects/@current/feature_flags/{flag['id']}/",
            json={"filters": depends_on(other["id"])},
        )
        assert r.status_code == 200, r.text
    project.flag("after-cycle", filters=depends_on(ping["id"]))
    project.flag("independent", filters=on())
    project.wait_visible("after-cycle", "independent")
    deadline = time.monotonic() + 2
    while "ping" in (flags := project.flags()["flags"]):
        assert time.monotonic() < deadline, flags
        time.sleep(0.05)
    assert set(flags) == {"after-cycle", "independent"}
    assert flags["after-cycle"]["enabled"] is False
    assert flags["after-cycle"]["reason"]["code"] == "missing_dependency"
    assert flags["after-cycle"]["reason"]["condition_index"] == 0
    assert flags["independent"]["enabled"] is True


def test_group_keys_are_strings_and_numbers_and_a_boolean_names_no_group(
    project: Project,
) -> None:
    """PostHog's flags service takes a group key only from a non-empty string or a number
    (its JSON text); ``true`` names no group, so a group-aggregated flag is not enabled."""
    project.capture(
        {
            "event": "$groupidentify",
            "distinct_id": "member",
            "properties": {
                "$group_type": "company",
                "$group_key": "true",
                "$group_set": {"tier": "gold"},
            },
        }
    )

    def group_flag(key: str, prop: dict[str, Any]) -> None:
        project.flag(
            key,
            filters={
                "aggregation_group_type_index": 0,
                "groups": [{"properties": [prop], "rollout_percentage": 100}],
            },
        )

    group_flag(
        "key-is-true",
        {
            "key": "$group_key",
            "value": "true",
            "type": "group",
            "group_type_index": 0,
            "operator": "exact",
        },
    )
    group_flag(
        "key-is-42",
        {
            "key": "$group_key",
            "value": "42",
            "type": "group",
            "group_type_index": 0,
            "operator": "exact",
        },
    )
    group_flag("gold", {"key": "tier", "value": "gold", "type": "group", "group_type_index": 0})
    project.flag("any-company", filters={"aggregation_group_type_index": 0, **on(100)})
    project.wait_visible("key-is-true", "key-is-42", "gold", "any-company")
    # The JSON value true is no group at all, even though a group keyed "true" exists.
    for no_group in (True, False, None, [], {}, ""):
        assert project.values("member", groups={"company": no_group}) == {
            "key-is-true": False,
            "key-is-42": False,
            "gold": False,
            "any-company": False,
        }, no_group
    # The string "true" names that group.
    assert project.values("member", groups={"company": "true"}) == {
        "key-is-true": True,
        "key-is-42": False,
        "gold": True,
        "any-company": True,
    }
    # A number is a key, spelled as its JSON text.
    assert project.values("member", groups={"company": 42}) == {
        "key-is-true": False,
        "key-is-42": True,
        "gold": False,
        "any-company": True,
    }
    assert (
        project.flags("member", groups={"company": True})["flags"]["any-company"]["reason"]["code"]
        == "no_group_type"
    )
    # The number is the hashed identifier too: 42 buckets as the string "42".
    project.flag("company-half", filters={"aggregation_group_type_index": 0, **on(50)})
    project.wait_visible("company-half")
    as_number = project.values("a", groups={"company": 42})["company-half"]
    assert as_number == project.values("b", groups={"company": "42"})["company-half"]
    assert as_number == (_bucket("company-half.42") <= 0.5)


# quota and freshness -----------------------------------------------------------------------


@pytest.fixture
def limited_server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(data_dir=tmp_path / "data", env={"FLAGSTAFF_FLAG_QUOTA_PER_MINUTE": "2"}).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_quota_limited_answer(limited_server: Server) -> None:
    Api(limited_server.url).create_flag(key="quota-flag", filters=on())
    seconds_into_minute = time.time() % 60
    if seconds_into_minute > 55:  # the quota window is the calendar minute
        time.sleep(60.5 - seconds_into_minute)
    with httpx.Client(base_url=limited_server.url, timeout=30.0) as client:

        def ask(path: str = "/flags?v=2") -> dict[str, Any]:
            body = {"api_key": PROJECT_TOKEN, "distinct_id": "q"}
            r = client.post(path, json=body)
            assert r.status_code == 200, r.text
            return r.json()

        first, second, third = ask(), ask("/flags?v=2&config=true"), ask()
        assert first["flags"]["quota-flag"]["enabled"] is True
        assert "quotaLimited" not in first and "quotaLimited" not in second
        assert third["flags"] == {}
        assert third["quotaLimited"] == ["feature_flags"]
        assert set(third) == set(first) | {"quotaLimited"}
        assert third["errorsWhileComputingFlags"] is False
        uuid.UUID(third["requestId"])
        configured = ask("/flags?v=2&config=true")
        assert set(configured) == set(second) | {"quotaLimited"}
        assert configured["flags"] == {}
        legacy = ask("/flags")
        assert legacy["featureFlags"] == {}
        assert legacy["quotaLimited"] == ["feature_flags"]


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[Server]:
    srv = Server(data_dir=tmp_path / "data", workers=2).start()
    try:
        yield srv
    finally:
        srv.stop()


def _worker_flag_requests(data_dir: Path) -> list[int]:
    counts = []
    for path in (data_dir / "metrics").glob("*.json"):
        counts.append(msgspec.json.decode(path.read_bytes()).get("flag_requests", 0))
    return counts


def test_flag_change_reaches_every_worker_within_a_second(two_workers: Server) -> None:
    api = Api(two_workers.url)
    flag = api.create_flag(key="fresh", filters=on())
    definitions = "/flags/definitions?token=" + PROJECT_TOKEN

    def ask() -> bool:
        # A new connection per request, so the kernel spreads them over both workers.
        r = httpx.post(
            two_workers.url + "/flags?v=2",
            json={"api_key": PROJECT_TOKEN, "distinct_id": "w"},
            timeout=10.0,
        )
        assert r.status_code == 200, r.text
        value = r.json()["flags"].get("fresh")
        return value is not None and value["enabled"]

    deadline = time.monotonic() + 2.0
    while not ask():
        assert time.monotonic() < deadline, "the new flag never became visible"
    for _ in range(40):
        assert ask()
    etag_before = api.get(definitions).headers["etag"]

    r = api.patch(f"/api/projects/@current/feature_flags/{flag['id']}/", json={"filters": on(0)})
    assert r.status_code == 200, r.text
    changed_at = time.monotonic()
    while time.monotonic() - changed_at < 1.0:
        ask()  # keep both workers' caches busy: either answer is fine within the second
    late_answers = [ask() for _ in range(30)]
    assert not any(late_answers), "a worker still served the old definition after 1 s"
    assert api.get(definitions).headers["etag"] != etag_before

    api.client.close()

    time.sleep(1.3)  # each worker writes its metrics snapshot every second
    busy = [n for n in _worker_flag_requests(two_workers.data_dir) if n > 0]
    assert len(busy) == 2, f"not every worker answered: {busy}"


def test_the_body_is_refused_as_posthog_does_only_when_flags_are_evaluated(
    project: Project,
) -> None:
    project.flag("body-on", filters=on())
    project.wait_visible("body-on")

    def answer(content: bytes) -> tuple[int, str | None, str | None]:
        r = project.http.post(
            "/flags?v=2",
            content=content.replace(b"%T", project.token.encode()),
            headers={"Content-Type": "application/json"},
        )
        if r.status_code == 200:
            return 200, None, ",".join(sorted(r.json()["flags"]))
        error = r.json()
        return r.status_code, error["code"], error.get("attr")

    refused = [
        (b'{"api_key": "%T", "distinct_id": true}', "missing_distinct_id", "distinct_id"),
        (b'{"api_key": "%T", "distinct_id": [1]}', "invalid_distinct_id", "distinct_id"),
        (b'{"api_key": "%T", "distinct_id": "a", "groups": 5}', "invalid_input", "groups"),
        (
            b'{"api_key": "%T", "distinct_id": "a", "person_properties": []}',
            "invalid_input",
            "person_properties",
        ),
        (b'{"api_key": "%T", "distinct_id": "a", "flag_keys": "x"}', "invalid_input", "flag_keys"),
        (
            b'{"api_key": "%T", "distinct_id": "a", "evaluation_contexts": {}}',
            "invalid_input",
            "evaluation_contexts",
        ),
        # the first wrong field in the order they are read, wherever it is in the body
        (
            b'{"api_key": "%T", "groups": 5, "distinct_id": [1]}',
            "invalid_distinct_id",
            "distinct_id",
        ),
        (b'{"api_key": "%T", "groups": 5}', "missing_distinct_id", "distinct_id"),
    ]
    for content, code, attr in refused:
        assert answer(content) == (400, code, attr), content
    # a bad token is answered first; nothing is refused when no flag is evaluated
    assert answer(b'{"api_key": 5, "groups": 5}')[0] == 401
    assert answer(b'{"api_key": "%T", "groups": 5, "disable_flags": true}') == (200, None, "")
    assert answer(b"[1]") == (400, "invalid_payload", None)
    tolerated = [
        b'{"api_key": "%T", "distinct_id": 42}',
        b'{"api_key": 0, "token": "%T", "distinct_id": 123456789012345678901234567890}',
        b'{"$token": "%T", "distinct_id": "a", "groups": {"g": 1, "h": true, "i": null}}',
        b'{"api_key": "%T", "distinct_id": "a", "$anon_distinct_id": 5, "device_id": []}',
        b'{"api_key": "%T", "distinct_id": "a", "person_properties": {"n": NaN, "m": 1e400}}',
        b'{"api_key": "%T", "distinct_id": "a\\u0000\\ud800", "timezone": 3, "geoip_disable": 1}',
        b'{"api_key": "%T", "distinct_id": "a", "flag_keys_to_evaluate": ["body-on"], '
        b'"flag_keys": "ignored", "evaluation_runtime": 7, "disable_flags": "yes"}',
    ]
    for content in tolerated:
        assert answer(content) == (200, None, "body-on"), content
