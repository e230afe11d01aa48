"""posthog-node (pinned in tooling/package.json) against the real server, driven through node."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.e2e.drivers import run_driver
from tests.e2e.flagset import (
    BANNER_PAYLOAD,
    PRO_PAYLOAD,
    SERVER_SIDE_KEYS,
    VARIANT_PAYLOADS,
    create_flags,
)
from tests.e2e.scenarios import (
    ACME,
    assert_flag_called_events,
    assert_ingest_outcome,
    assert_local_matches_remote,
    flag_grid,
)
from tests.e2e.state import ProjectState, assert_props, group
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Api, Server

pytestmark = pytest.mark.usefixtures("node_tooling")

# What posthog-node adds to every event, and what ingestion adds.
NODE_PROPS = {"$lib", "$lib_version", "$is_server", "$geoip_disable", "$ip"}
DRIVER = "e2e_node_sdk.mjs"


def _spec(server: Server, scenario: str) -> dict[str, object]:
    return {
        "scenario": scenario,
        "host": server.url,
        "token": PROJECT_TOKEN,
        "personalKey": PERSONAL_KEY,
        "grid": flag_grid(),
    }


def test_node_sdk_capture_people_groups_and_historical_migration(
    flagstaff: Server, mgmt: Api
) -> None:
    report = run_driver(DRIVER, _spec(flagstaff, "ingest"))

    batches = report.to("/batch")
    assert len(batches) == len(report.requests) == 2, report.requests
    for batch in batches:
        assert batch.status == 200
        assert batch.encoding() == "gzip" and batch.headers["content-encoding"] == "gzip"
        assert batch.headers["user-agent"].startswith("posthog-node/")
    live, old = (b.payload() for b in batches)
    assert "historical_migration" not in live and old["historical_migration"] is True

    state = ProjectState.read(mgmt)
    assert state.names() == Counter(
        {
            ("page viewed", "anon-node"): 1,
            ("order completed", "user-node"): 1,
            ("$set", "user-node"): 1,
            ("$identify", "user-node"): 1,
            ("$create_alias", "user-node"): 1,
            ("$groupidentify", "user-node"): 1,
            ("invoice paid", "user-node"): 1,
            ("docs viewed", "ghost-node"): 1,
            ("$identify", "hist-node"): 1,
            ("order completed", "hist-node"): 1,
        }
    )
    assert_props(
        state.only("$set")["properties"],
        {
            "$set": {"email": "ada@example.com", "plan": "pro"},
            "$set_once": {"first_seen": "2026-01-01"},
        },
        NODE_PROPS,
    )
    assert_props(
        state.only("$create_alias")["properties"],
        {"distinct_id": "user-node", "alias": "legacy-node"},
        NODE_PROPS,
    )
    assert_ingest_outcome(mgmt, state, "node", NODE_PROPS, NODE_PROPS)


def test_node_sdk_remote_and_local_flags_and_flag_called_events(
    flagstaff: Server, mgmt: Api
) -> None:
    flags = create_flags(mgmt)
    report = run_driver(DRIVER, _spec(flagstaff, "flags"))
    results = report.results

    assert all(r.status == 200 for r in report.requests if r.route != "/flags/definitions")
    remote_config = [r for r in report.requests if r.path.endswith("/remote_config")]
    assert [r.headers["authorization"] for r in remote_config] == [f"Bearer {PERSONAL_KEY}"]
    flag_calls = report.to("/flags")
    assert flag_calls and all(r.query.get("v") == "2" for r in flag_calls)
    for call in flag_calls:
        body = call.payload()
        assert body["token"] == PROJECT_TOKEN and body["evaluation_runtime"] == "server"
    assert all(b.encoding() == "gzip" for b in report.to("/batch"))
    definitions = report.to("/flags/definitions")
    assert [r.status for r in definitions] == [200, 304], "the second poll must hit the ETag"
    assert definitions[1].headers["if-none-match"] == definitions[0].response_headers["etag"]
    assert all(r.headers["authorization"] == f"Bearer {PERSONAL_KEY}" for r in definitions)

    variant = results["variant"]
    assert variant in VARIANT_PAYLOADS
    assert results["proStored"] is True and results["proFree"] is False
    assert results["proFreeOverridden"] is True
    assert results["companyAcme"] is True and results["companyInitech"] is False
    assert results["proPayload"] == PRO_PAYLOAD
    assert results["remoteConfig"] == PRO_PAYLOAD
    assert set(results["all"]) == set(SERVER_SIDE_KEYS) and results["all"]["server-only"] is True
    assert results["all"]["checkout-variant"] == variant
    assert results["allAndPayloads"]["featureFlags"] == results["all"]
    assert results["allAndPayloads"]["featureFlagPayloads"] == {
        "pro-feature": PRO_PAYLOAD,
        "everyone-banner": BANNER_PAYLOAD,
        "checkout-variant": VARIANT_PAYLOADS[variant],
    }
    assert results["snapshotPro"] is True
    assert results["localReady"] is True
    assert results["localFlagRequests"] == 0, "local evaluation asked the server"
    assert_local_matches_remote(results["localGrid"], results["remoteGrid"])

    state = ProjectState.read(mgmt, extra_ids=[c["distinct_id"] for c in flag_grid()])
    assert_flag_called_events(state, flags, "node", variant)
    assert state.names() == Counter(
        {
            ("$groupidentify", "user-node"): 1,
            ("$set", "user-node"): 1,
            ("$feature_flag_called", "user-node"): 5,
            ("$feature_flag_called", "free-node"): 2,
            ("checkout started", "user-node"): 1,
        }
    )
    assert_props(
        state.only("checkout started")["properties"],
        {
            **{f"$feature/{k}": results["all"][k] for k in SERVER_SIDE_KEYS},
            "$active_feature_flags": sorted(k for k in SERVER_SIDE_KEYS if results["all"][k]),
        },
        NODE_PROPS,
    )
    state.assert_people({"ada": {"user-node"}, "free": {"free-node"}})
    state.assert_no_person(*(c["distinct_id"] for c in flag_grid()))
    state.assert_events_belong_to_people()
    assert state.group_types == {"company": 0}
    acme = group(mgmt, 0, "acme")
    assert acme is not None and acme["group_properties"] == ACME
    assert state.warnings == []
