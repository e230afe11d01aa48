"""OpenFeature's JavaScript SDKs with the generic OFREP providers against Flagstaff:

- the server SDK with ``@openfeature/ofrep-provider`` (Node), one request per evaluation, on
  stored and sent persons, groups, splits and variants, agreeing with /flags;
- the web SDK with ``@openfeature/ofrep-web-provider`` in headless Chromium: the bulk
  evaluation (cross-origin, with the token in a header), its ETag sent back on each poll and
  answered 304, then a flag change seen at the next poll.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.deps import NODE_MODULES
from tests.e2e.drivers import run_driver
from tests.e2e.site import PAGES, Site
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Api, Server

AUTH = {"Authorization": f"Bearer {PERSONAL_KEY}"}
OPENFEATURE = NODE_MODULES / "@openfeature"
WEB_MODULES = {
    "/modules/openfeature-core.js": OPENFEATURE / "core/dist/esm/index.js",
    "/modules/openfeature-web-sdk.js": OPENFEATURE / "web-sdk/dist/esm/index.js",
    # the web provider's own (newer) copy of ofrep-core
    "/modules/openfeature-ofrep-core.js": OPENFEATURE
    / "ofrep-web-provider/node_modules/@openfeature/ofrep-core/index.esm.js",
    "/modules/openfeature-ofrep-web-provider.js": OPENFEATURE / "ofrep-web-provider/index.esm.js",
}


def _on(rollout: float = 100, **condition: Any) -> dict[str, Any]:
    return {"groups": [{"properties": [], "rollout_percentage": rollout, **condition}]}


def _pro() -> list[dict[str, Any]]:
    return [{"key": "plan", "value": ["pro"], "operator": "exact", "type": "person"}]


def _flags(mgmt: Api) -> dict[str, int]:
    """The scenario's flags; their ids by key."""
    gold = {"key": "tier", "value": "gold", "type": "group", "group_type_index": 0}
    ids = {}
    for key, filters, active in (
        ("pro-only", {**_on(properties=_pro()), "payloads": {"true": '{"plan": "pro"}'}}, True),
        ("half", _on(50), True),
        (
            "ab",
            {
                **_on(),
                "multivariate": {
                    "variants": [
                        {"key": "control", "rollout_percentage": 50},
                        {"key": "test", "rollout_percentage": 50},
                    ]
                },
                "payloads": {"test": '"shiny"'},
            },
            True,
        ),
        (
            "gold-companies",
            {"aggregation_group_type_index": 0, "groups": [{"properties": [gold]}]},
            True,
        ),
        ("switched-off", _on(), False),
    ):
        ids[key] = mgmt.create_flag(key=key, filters=filters, active=active)["id"]
    return ids


def _store(http: httpx.Client) -> None:
    group = {"$group_type": "company", "$group_key": "acme", "$group_set": {"tier": "gold"}}
    batch = [
        {
            "event": "$identify",
            "distinct_id": "stored-pro",
            "properties": {"$set": {"plan": "pro"}},
        },
        {"event": "$groupidentify", "distinct_id": "stored-pro", "properties": group},
    ]
    assert http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch}).status_code == 200


def _expected(http: httpx.Client, context: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"api_key": PROJECT_TOKEN, "distinct_id": context["targetingKey"]}
    props = {k: v for k, v in context.items() if k not in ("targetingKey", "groups")}
    body.update(person_properties=props, groups=context.get("groups", {}))
    r = http.post("/flags?v=2", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json()["flags"])


def test_node_server_provider_agrees_with_flags(
    flagstaff: Server, mgmt: Api, node_tooling: None
) -> None:
    _flags(mgmt)
    contexts: list[dict[str, Any]] = [
        {"targetingKey": "stored-pro"},
        {"targetingKey": "stored-pro", "plan": "free"},
        {"targetingKey": "visitor", "plan": "pro", "groups": {"company": "acme"}},
        *({"targetingKey": f"node-{i}"} for i in range(16)),
    ]
    evaluations: list[dict[str, Any]] = []
    expected: list[Any] = []
    with httpx.Client(base_url=flagstaff.url, timeout=30.0) as http:
        _store(http)
        for context in contexts:
            for key, flag in _expected(http, context).items():
                value = flag.get("variant") or flag["enabled"]
                kind = "string" if isinstance(value, str) else "boolean"
                default = "code-default" if kind == "string" else not value
                evaluations.append(
                    {"key": key, "type": kind, "default": default, "context": context}
                )
                expected.append((key, value, flag["metadata"].get("payload")))
    evaluations += [
        {"key": "switched-off", "type": "boolean", "default": True, "context": contexts[0]},
        {"key": "no-such-flag", "type": "boolean", "default": True, "context": contexts[0]},
        {"key": "half", "type": "boolean", "default": True, "context": {"plan": "pro"}},
        {"key": "ab", "type": "boolean", "default": True, "context": contexts[0]},
    ]
    report = run_driver(
        "drive_openfeature_node.mjs",
        {"baseUrl": flagstaff.url, "token": PROJECT_TOKEN, "evaluations": evaluations},
    )
    results = report.results
    assert len(results) == len(evaluations)
    reasons = set()
    for (key, value, payload), got, asked in zip(expected, results, evaluations, strict=False):
        where = f"{key} for {asked['context']}: {got}"
        assert got["errorCode"] is None, where
        assert got["value"] == value, where
        assert got["variant"] == (value if isinstance(value, str) else str(value).lower()), where
        assert got["flagMetadata"].get("payload") == payload, where
        reasons.add(got["reason"])
    assert reasons == {"TARGETING_MATCH", "SPLIT", "DEFAULT"}
    disabled, missing, no_key, wrong_type = results[len(expected) :]
    assert (disabled["value"], disabled["reason"], disabled["errorCode"]) == (
        False,
        "DISABLED",
        None,
    )
    assert (missing["value"], missing["errorCode"]) == (True, "FLAG_NOT_FOUND")
    assert (no_key["value"], no_key["errorCode"]) == (True, "TARGETING_KEY_MISSING")
    # a variant asked for as a boolean: the SDK returns the default with a type mismatch
    assert (wrong_type["value"], wrong_type["errorCode"]) == (True, "TYPE_MISMATCH")


@pytest.mark.usefixtures("chromium")
def test_web_provider_bulk_etag_polling_and_change(flagstaff: Server, mgmt: Api) -> None:
    flag_id = _flags(mgmt)["pro-only"]
    context = {"targetingKey": "stored-pro", "groups": {"company": "acme"}}
    flags = [
        ["pro-only", "boolean"],
        ["half", "boolean"],
        ["gold-companies", "boolean"],
        ["switched-off", "boolean"],
        ["ab", "string"],
        ["no-such-flag", "boolean"],
    ]
    with httpx.Client(base_url=flagstaff.url, timeout=30.0) as http:
        _store(http)
        expected = _expected(http, context)
    settings = {
        "baseUrl": flagstaff.url,
        "token": PROJECT_TOKEN,
        "pollMs": 300,
        "context": context,
        "flags": flags,
    }
    with Site() as site:
        for path, file in WEB_MODULES.items():
            site.add(path, file.read_bytes(), "text/javascript")
        template = (PAGES / "openfeature.html").read_text()
        page_url = site.add(
            "/openfeature.html", template.replace("__SETTINGS__", json.dumps(settings)).encode()
        )
        report = run_driver(
            "drive_openfeature_web.mjs",
            {
                "pageUrl": page_url,
                "bulkUrl": f"{flagstaff.url}/ofrep/v1/evaluate/flags",
                "minNotModified": 2,
                "change": {
                    "url": f"{flagstaff.url}/api/projects/@current/feature_flags/{flag_id}/",
                    "method": "PATCH",
                    "headers": {**AUTH, "Content-Type": "application/json"},
                    "body": {"filters": _on(0)},  # pro-only off for everyone
                },
            },
        )
    raw = report.raw
    assert raw["problems"] == [], raw["problems"]
    before, after = raw["before"], raw["after"]
    for key in ("pro-only", "half", "gold-companies", "ab"):
        value = expected[key].get("variant") or expected[key]["enabled"]
        assert before[key]["value"] == value, (key, before[key])
        assert before[key]["errorCode"] is None, (key, before[key])
    assert before["pro-only"] == {
        "value": True,
        "variant": "true",
        "reason": "TARGETING_MATCH",
        "errorCode": None,
        "flagMetadata": {"payload": '{"plan": "pro"}'},
    }
    assert before["gold-companies"]["value"] is True
    assert (before["switched-off"]["value"], before["switched-off"]["reason"]) == (
        False,
        "DISABLED",
    )
    assert before["no-such-flag"]["errorCode"] == "FLAG_NOT_FOUND"

    bulk = raw["bulk"]
    first = bulk[0]
    assert first["status"] == 200 and first["etag"] and first["ifNoneMatch"] is None
    polls = bulk[1:]
    assert [p["status"] for p in polls[:2]] == [304, 304]
    assert all(p["ifNoneMatch"] == first["etag"] for p in polls[:2])
    changed = next(p for p in polls if p["status"] == 200)
    assert changed["ifNoneMatch"] == first["etag"] and changed["etag"] != first["etag"]

    assert raw["flagsChanged"] == ["pro-only"]
    assert after["pro-only"]["value"] is False and after["pro-only"]["reason"] == "SPLIT"
    assert {k: v for k, v in after.items() if k != "pro-only"} == {
        k: v for k, v in before.items() if k != "pro-only"
    }
