"""What the server-side SDK scenarios (posthog-python, posthog-node) must leave behind.

Both SDKs run the same story with distinct ids suffixed by the SDK's name (``user-py``,
``user-node``): anonymous browsing, an order with a group, person properties, an identify
merging the anonymous id, an alias, a group identify, an event naming an unknown group, a
personless event and a historical migration; then remote and local flag evaluation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from tests.e2e.flagset import SERVER_SIDE_KEYS
from tests.e2e.state import ProjectState, assert_props, group
from tests.server import Api

ACME = {"name": "Acme Inc", "subscription": "enterprise", "founded": "2015-03-01T00:00:00Z"}


def near(stored: str, sent: str, seconds: float = 5.0) -> bool:
    """Stored times move by the request's transit time: sent_at corrects client clock skew."""
    delta = datetime.fromisoformat(stored) - datetime.fromisoformat(sent)
    return abs(delta.total_seconds()) < seconds


def copied_to_person(event: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """Event properties ingestion copies to the person, with their ``$initial_`` twins."""
    props = event["properties"]
    return {
        name: props[key]
        for key in keys
        if key in props
        for name in (key, "$initial_" + key.removeprefix("$"))
    }


def assert_ingest_outcome(
    api: Api,
    state: ProjectState,
    sdk: str,
    capture_props: set[str],
    plain_props: set[str],
    person_keys: Iterable[str] = (),
) -> None:
    """The parts of the ingestion story both SDKs tell the same way.

    ``capture_props``: what the SDK and ingestion add to captured events; ``plain_props``: to
    the identify/alias/group/set helpers' events; ``person_keys``: the SDK's event properties
    that ingestion copies to persons.
    """
    user, anon, legacy = f"user-{sdk}", f"anon-{sdk}", f"legacy-{sdk}"
    ghost, hist = f"ghost-{sdk}", f"hist-{sdk}"
    order = state.only("order completed", user)
    assert_props(
        order["properties"],
        {"plan": "pro", "amount": 19.99, "items": 3, "$groups": {"company": "acme"}},
        capture_props,
    )
    assert_props(state.only("page viewed", anon)["properties"], {"path": "/pricing"}, capture_props)
    identify = state.only("$identify", user)
    assert_props(
        identify["properties"],
        {"$set": {"name": "Ada"}, "$set_once": {"signup": "web"}, "$anon_distinct_id": anon},
        capture_props | plain_props,
    )
    assert_props(
        state.only("$groupidentify", user)["properties"],
        {"$group_type": "company", "$group_key": "acme", "$group_set": ACME},
        plain_props,
    )
    assert_props(
        state.only("invoice paid", user)["properties"],
        {"$groups": {"company": "initech"}},
        capture_props,
    )
    assert_props(
        state.only("docs viewed", ghost)["properties"],
        {"$process_person_profile": False, "path": "/docs"},
        capture_props,
    )

    state.assert_people({"ada": {anon, user, legacy}, "historical": {hist}})
    state.assert_no_person(ghost)
    state.assert_events_belong_to_people()
    ada = state.person(user)
    assert ada["is_identified"] is True
    assert ada["properties"] == {
        "email": "ada@example.com",
        "plan": "pro",
        "first_seen": "2026-01-01",
        "name": "Ada",
        "signup": "web",
        **copied_to_person(order, person_keys),
    }

    old_order = state.only("order completed", hist)
    assert_props(old_order["properties"], {"plan": "basic", "amount": 5}, capture_props)
    old_person = state.person(hist)
    assert old_person["properties"] == {
        "email": "old@example.com",
        **copied_to_person(old_order, person_keys),
    }
    assert near(old_person["created_at"], "2024-05-01T09:00:00Z")
    historical = [e for e in state.events if e["historical"]]
    assert [(e["event"], e["distinct_id"]) for e in historical] == [
        ("$identify", hist),
        ("order completed", hist),
    ]
    assert near(historical[0]["timestamp"], "2024-05-01T09:00:00Z")
    assert near(historical[1]["timestamp"], "2024-05-01T09:05:00Z")

    assert state.group_types == {"company": 0}
    acme = group(api, 0, "acme")
    assert acme is not None and acme["group_properties"] == ACME
    assert group(api, 0, "initech") is None, "$groups on an event must not create a group"
    assert state.warnings == []


def flag_grid() -> list[dict[str, Any]]:
    """Inputs for comparing local with remote evaluation; no person is stored for these ids."""
    return [
        {
            "distinct_id": f"grid-{n}",
            "person_properties": {"plan": "pro" if n % 2 else "free"},
            "groups": {"company": "acme" if n % 3 else "initech"},
            "group_properties": {"company": {"subscription": "enterprise" if n % 4 else "free"}},
        }
        for n in range(24)
    ]


def assert_local_matches_remote(local: list[dict[str, Any]], remote: list[dict[str, Any]]) -> None:
    """Both SDKs also evaluate client-only flags locally (the definitions carry every flag, as
    PostHog's do), so the comparison covers the flags served to a server SDK."""
    for case, local_flags, remote_flags in zip(flag_grid(), local, remote, strict=True):
        assert set(remote_flags) == set(SERVER_SIDE_KEYS), case
        assert {k: local_flags[k] for k in SERVER_SIDE_KEYS} == remote_flags, case
    for key in ("pro-feature", "company-beta", "half-rollout"):
        assert {r[key] for r in remote} == {True, False}, f"the grid never varies {key}"
    assert {r["checkout-variant"] for r in remote} == {"control", "test"}


def assert_flag_called_events(
    state: ProjectState, flags: dict[str, dict[str, Any]], sdk: str, variant: str
) -> None:
    """One event per remote get_feature_flag answer, plus the evaluate_flags access."""
    user, free = f"user-{sdk}", f"free-{sdk}"
    called = state.all("$feature_flag_called")
    assert Counter(
        (
            e["distinct_id"],
            e["properties"]["$feature_flag"],
            e["properties"]["$feature_flag_response"],
            e["properties"].get("$groups", {}).get("company"),
        )
        for e in called
    ) == Counter(
        {
            (user, "pro-feature", True, None): 1,
            (free, "pro-feature", False, None): 1,
            (free, "pro-feature", True, None): 1,
            (user, "checkout-variant", variant, None): 1,
            (user, "company-beta", True, "acme"): 1,
            (user, "company-beta", False, "initech"): 1,
            (user, "pro-feature", True, "acme"): 1,
        }
    )
    for e in called:
        props = e["properties"]
        flag = flags[props["$feature_flag"]]
        assert props[f"$feature/{flag['key']}"] == props["$feature_flag_response"]
        assert props["$feature_flag_id"] == flag["id"]
        assert props["$feature_flag_version"] == flag["version"]
        assert props["locally_evaluated"] is False
