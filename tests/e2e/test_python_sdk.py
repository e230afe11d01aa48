"""posthog-python (the venv's release) against the real server: ingestion, people, groups, flags."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from posthog import Posthog

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
from tests.e2e.traffic import python_traffic
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Api, Server

# posthog-python 7 marks get_feature_flag & co. deprecated in favour of evaluate_flags; both
# are what users run, so both are exercised.
pytestmark = pytest.mark.filterwarnings("ignore:`get_:DeprecationWarning")

# What posthog-python adds to every event (captures also describe the runtime), and what
# ingestion adds ($ip).
SDK_PROPS = {"$lib", "$lib_version", "$geoip_disable", "$is_server", "$ip"}
CAPTURE_PROPS = SDK_PROPS | {
    "$python_runtime",
    "$python_version",
    "$os",
    "$os_version",
    "$os_distro",
}
# Of those, ingestion copies these to the person (PostHog does the same).
PERSON_KEYS = ("$os", "$os_version")


def _client(server: Server, **options: Any) -> Posthog:
    return Posthog(PROJECT_TOKEN, host=server.url, max_retries=0, **options)


def _close(client: Posthog) -> None:
    client.flush()
    client.shutdown()


def test_python_sdk_capture_people_groups_and_historical_migration(
    flagstaff: Server, mgmt: Api
) -> None:
    with python_traffic() as traffic:
        client = _client(flagstaff)
        client.capture("page viewed", distinct_id="anon-py", properties={"path": "/pricing"})
        client.capture(
            "order completed",
            distinct_id="user-py",
            properties={"plan": "pro", "amount": 19.99, "items": 3},
            groups={"company": "acme"},
        )
        client.set(distinct_id="user-py", properties={"email": "ada@example.com", "plan": "pro"})
        client.set_once(distinct_id="user-py", properties={"first_seen": "2026-01-01"})
        client.set_once(distinct_id="user-py", properties={"first_seen": "2030-12-31"})
        client.capture(
            "$identify",
            distinct_id="user-py",
            properties={
                "$set": {"name": "Ada"},
                "$set_once": {"signup": "web"},
                "$anon_distinct_id": "anon-py",
            },
        )
        client.alias(previous_id="legacy-py", distinct_id="user-py")
        client.group_identify("company", "acme", ACME, distinct_id="user-py")
        client.capture("invoice paid", distinct_id="user-py", groups={"company": "initech"})
        client.capture(
            "docs viewed",
            distinct_id="ghost-py",
            properties={"$process_person_profile": False, "path": "/docs"},
        )
        _close(client)

        history = _client(flagstaff, historical_migration=True, gzip=True)
        history.capture(
            "$identify",
            distinct_id="hist-py",
            properties={"$set": {"email": "old@example.com"}},
            timestamp="2024-05-01T09:00:00Z",
        )
        history.capture(
            "order completed",
            distinct_id="hist-py",
            properties={"plan": "basic", "amount": 5},
            timestamp=datetime(2024, 5, 1, 9, 5, tzinfo=UTC),
        )
        _close(history)

    batches = traffic.to("/batch")
    assert len(batches) == len(traffic.requests) == 2, traffic.requests
    assert all(r.status == 200 for r in batches)
    live, old = batches
    assert live.encoding() == "json" and live.payload()["historical_migration"] is False
    assert old.encoding() == "gzip" and old.payload()["historical_migration"] is True

    state = ProjectState.read(mgmt)
    assert state.names() == Counter(
        {
            ("page viewed", "anon-py"): 1,
            ("order completed", "user-py"): 1,
            ("$set", "user-py"): 1,
            ("$set_once", "user-py"): 2,
            ("$identify", "user-py"): 1,
            ("$create_alias", "legacy-py"): 1,
            ("$groupidentify", "user-py"): 1,
            ("invoice paid", "user-py"): 1,
            ("docs viewed", "ghost-py"): 1,
            ("$identify", "hist-py"): 1,
            ("order completed", "hist-py"): 1,
        }
    )
    assert_props(
        state.only("$set")["properties"],
        {"$set": {"email": "ada@example.com", "plan": "pro"}},
        SDK_PROPS,
    )
    assert sorted(e["properties"]["$set_once"]["first_seen"] for e in state.all("$set_once")) == [
        "2026-01-01",
        "2030-12-31",
    ]
    assert_props(
        state.only("$create_alias")["properties"],
        {"distinct_id": "legacy-py", "alias": "user-py"},
        SDK_PROPS,
    )
    assert_ingest_outcome(mgmt, state, "py", CAPTURE_PROPS, SDK_PROPS, PERSON_KEYS)


def test_python_sdk_remote_and_local_flags_and_flag_called_events(
    flagstaff: Server, mgmt: Api
) -> None:
    grid = flag_grid()
    with python_traffic() as traffic:
        setup = _client(flagstaff)
        setup.group_identify("company", "acme", ACME, distinct_id="user-py")
        setup.set(distinct_id="user-py", properties={"plan": "pro"})
        _close(setup)
        flags = create_flags(mgmt)

        remote = _client(flagstaff)
        # Stored person and group properties drive remote evaluation.
        assert remote.get_feature_flag("pro-feature", "user-py") is True
        assert remote.get_feature_flag("pro-feature", "free-py") is False
        overridden = remote.get_feature_flag(
            "pro-feature", "free-py", person_properties={"plan": "pro"}
        )
        assert overridden is True
        variant = remote.get_feature_flag("checkout-variant", "user-py")
        assert variant in VARIANT_PAYLOADS
        acme = remote.get_feature_flag("company-beta", "user-py", groups={"company": "acme"})
        assert acme is True
        initech = remote.get_feature_flag("company-beta", "user-py", groups={"company": "initech"})
        assert initech is False
        assert remote.get_feature_flag_payload("pro-feature", "user-py") == PRO_PAYLOAD
        variant_payload = remote.get_feature_flag_payload("checkout-variant", "user-py")
        assert variant_payload == VARIANT_PAYLOADS[variant]
        everything = remote.get_all_flags_and_payloads("user-py", groups={"company": "acme"})
        assert (
            remote.get_all_flags("user-py", groups={"company": "acme"})
            == (everything["featureFlags"])
        )
        snapshot = remote.evaluate_flags("user-py", groups={"company": "acme"})
        assert snapshot.is_enabled("pro-feature")
        remote.capture("checkout started", distinct_id="user-py", flags=snapshot)
        remote.flush()

        local = _client(flagstaff, secret_key=PERSONAL_KEY, poll_interval=600)
        local.load_feature_flags()
        local.load_feature_flags()
        remote_config = local.get_remote_config_payload("pro-feature")
        remote_flag_calls = len(traffic.to("/flags"))
        local_results = [local.get_all_flags(**c, only_evaluate_locally=True) for c in grid]
        assert len(traffic.to("/flags")) == remote_flag_calls, "local evaluation asked the server"
        remote_results = [remote.get_all_flags(**c) for c in grid]
        _close(local)
        _close(remote)

    assert all(r.status == 200 for r in traffic.requests if r.route != "/flags/definitions")
    remote_config_calls = [r for r in traffic.requests if r.path.endswith("/remote_config")]
    assert len(remote_config_calls) == 1
    assert remote_config_calls[0].headers["authorization"] == f"Bearer {PERSONAL_KEY}"
    definitions = traffic.to("/flags/definitions")
    assert [r.status for r in definitions] == [200, 304], "the second poll must hit the ETag"
    assert definitions[1].headers["if-none-match"] == definitions[0].response_headers["etag"]
    assert all(r.headers["authorization"] == f"Bearer {PERSONAL_KEY}" for r in definitions)
    assert all(r.payload()["api_key"] == PROJECT_TOKEN for r in traffic.to("/flags"))

    assert set(everything["featureFlags"]) == set(SERVER_SIDE_KEYS)
    assert everything["featureFlags"]["server-only"] is True
    assert everything["featureFlags"]["checkout-variant"] == variant
    # get_all_flags_and_payloads hands payloads over as the JSON text the server sent.
    assert everything["featureFlagPayloads"] == {
        "pro-feature": json.dumps(PRO_PAYLOAD),
        "everyone-banner": json.dumps(BANNER_PAYLOAD),
        "checkout-variant": json.dumps(VARIANT_PAYLOADS[variant]),
    }
    assert_local_matches_remote(local_results, remote_results)
    # posthog-python hands over the stored payload text as the server sends it.
    assert json.loads(remote_config) == PRO_PAYLOAD

    state = ProjectState.read(mgmt, extra_ids=[c["distinct_id"] for c in grid])
    assert_flag_called_events(state, flags, "py", variant)
    assert state.names() == Counter(
        {
            ("$groupidentify", "user-py"): 1,
            ("$set", "user-py"): 1,
            ("$feature_flag_called", "user-py"): 5,
            ("$feature_flag_called", "free-py"): 2,
            ("checkout started", "user-py"): 1,
        }
    )
    all_flags = everything["featureFlags"]
    assert_props(
        state.only("checkout started")["properties"],
        {
            **{f"$feature/{k}": all_flags[k] for k in SERVER_SIDE_KEYS},
            "$active_feature_flags": sorted(k for k in SERVER_SIDE_KEYS if all_flags[k]),
        },
        CAPTURE_PROPS,
    )
    state.assert_people({"ada": {"user-py"}, "free": {"free-py"}})
    state.assert_no_person(*(c["distinct_id"] for c in grid))
    state.assert_events_belong_to_people()
    assert state.group_types == {"company": 0}
    stored = group(mgmt, 0, "acme")
    assert stored is not None and stored["group_properties"] == ACME
    assert state.warnings == []
