"""Guardrails that act, against the real server (SQLite or PostgreSQL): a variant that makes a
guardrail metric significantly worse is reported once (activity log entry and the
``experiment.guardrail_breached`` webhook naming metric, variant and interval), and with
``auto_stop`` the experiment ends and everyone gets the control variant through the flag's
ordinary update path, not held by the project's approval policy. The server judges
guardrails every 0.3 s here (``FLAGSTAFF_GUARDRAIL_CHECK_SECONDS``; 30 s by default)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest

from flagstaff.activity.webhooks import EVENT_HEADER
from tests.api.people import PASSWORD, user_api
from tests.server import PROJECT_TOKEN, Api, Server
from tests.webhook_receiver import Receiver

P = "/api/projects/@current"
ADMIN = "admin@example.com"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Receiver]]:
    receiver = Receiver()
    server = Server(
        tmp_path_factory.mktemp("guardrails") / "data",
        env={
            "FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN,
            "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD,
            "FLAGSTAFF_GUARDRAIL_CHECK_SECONDS": "0.3",
        },
    ).start()
    try:
        yield server, receiver
    finally:
        server.stop()
        receiver.close()


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def _experiment(api: Api, *, auto_stop: bool) -> dict[str, Any]:
    guardrail = {
        "kind": "ExperimentMetric",
        "metric_type": "mean",
        "uuid": "errors",
        "name": "Checkout errors",
        "goal": "decrease",
        "source": {"kind": "EventsNode", "event": "checkout_error"},
    }
    made = api.post(
        f"{P}/experiments/",
        json={
            "name": "Checkout redesign",
            "feature_flag_key": f"g-{uuid.uuid4().hex[:10]}",
            "start_date": "2024-01-01T00:00:00Z",
            "metrics_guardrail": [guardrail],
            "stats_config": {"auto_stop": auto_stop},
        },
    )
    assert made.status_code == 201, made.text
    return dict(made.json())


def _traffic(http: httpx.Client, key: str, errors_in_test: int) -> None:
    """300 persons per variant; the test variant's persons hit errors far more often."""
    t0 = int(time.time() * 1000) - 600_000
    events: list[dict[str, Any]] = []
    tag = uuid.uuid4().hex[:6]
    for i in range(600):
        variant = "control" if i % 2 else "test"
        did = f"g{i}-{tag}"
        props = {"$feature_flag": key, "$feature_flag_response": variant}
        events.append(
            {"event": "$feature_flag_called", "distinct_id": did, "timestamp": _iso(t0 + i),
             "properties": props}
        )  # fmt: skip
        errors = (i % errors_in_test == 0) if variant == "test" else (i % 10 == 1)
        for e in range(3 if variant == "test" and errors else int(errors)):
            events.append(
                {"event": "checkout_error", "distinct_id": did,
                 "timestamp": _iso(t0 + 10_000 + i * 10 + e), "properties": {}}
            )  # fmt: skip
    answer = http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": events})
    assert answer.status_code == 200, answer.text


def _breach_entries(api: Api, experiment_id: int) -> list[dict[str, Any]]:
    page = api.get(f"{P}/activity_log/").json()["results"]
    return [
        entry
        for entry in page
        if entry["scope"] == "Experiment"
        and entry["item_id"] == str(experiment_id)
        and entry["activity"] == "guardrail_breached"
    ]


def _wait(what: Any, seconds: float = 20.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("never happened")


def test_a_breach_is_reported_once_and_auto_stop_serves_control(
    served: tuple[Server, Receiver],
) -> None:
    server, receiver = served
    admin = user_api(server, ADMIN)
    hook = admin.post(f"{P}/webhooks/", json={"url": receiver.url("/guard"), "scopes": []})
    assert hook.status_code == 201, hook.text
    assert admin.patch(f"{P}/approval_policy/", json={"enabled": True}).status_code == 200
    try:
        created = _experiment(admin, auto_stop=True)
        with httpx.Client(base_url=server.url) as http:
            _traffic(http, created["feature_flag_key"], errors_in_test=2)
        entries = _wait(lambda: _breach_entries(admin, created["id"]))
        payload = entries[0]["detail"]["trigger"]["payload"]
        assert (payload["metric_uuid"], payload["variant"]) == ("errors", "test")
        low, high = payload["confidence_interval"]
        assert 0 < low < high and "Checkout errors" in payload["reason"]

        sent = _wait(
            lambda: [
                r
                for r in receiver.at("/guard")
                if r.headers[EVENT_HEADER] == "experiment.guardrail_breached"
            ]
        )
        body = msgspec.json.decode(sent[0].body)
        assert body["activity"]["detail"]["trigger"]["payload"]["variant"] == "test"

        # auto_stop: ended, and the flag serves control to everyone despite the policy
        experiment = _wait(
            lambda: (e := admin.get(f"{P}/experiments/{created['id']}/").json())["end_date"] and e
        )
        assert experiment["conclusion"] == "stopped_early"
        flag = admin.get(f"{P}/feature_flags/{created['feature_flag']['id']}/").json()
        split = {
            v["key"]: v["rollout_percentage"] for v in flag["filters"]["multivariate"]["variants"]
        }
        assert split == {"control": 100, "test": 0}
        history = admin.get(f"{P}/feature_flags/{flag['id']}/activity/").json()["results"]
        stop = next(h for h in history if (h["detail"].get("trigger") or {}).get("job_type"))
        assert stop["detail"]["trigger"]["job_type"] == "experiment_guardrail"
        assert "Checkout errors" in stop["detail"]["trigger"]["payload"]["reason"]
        answer = httpx.post(
            f"{server.url}/flags/?v=2",
            json={"api_key": PROJECT_TOKEN, "distinct_id": "anyone-at-all"},
        ).json()
        assert answer["flags"][created["feature_flag_key"]]["variant"] == "control"

        time.sleep(1.0)  # three more checks: still one report
        assert len(_breach_entries(admin, created["id"])) == 1
    finally:
        admin.patch(f"{P}/approval_policy/", json={"enabled": False})


def test_not_significant_is_never_a_breach(served: tuple[Server, Receiver]) -> None:
    server, _ = served
    admin = user_api(server, ADMIN)
    created = _experiment(admin, auto_stop=True)
    with httpx.Client(base_url=server.url) as http:
        _traffic(
            http, created["feature_flag_key"], errors_in_test=9
        )  # a rise too small to tell yet
    results = admin.get(f"{P}/experiments/{created['id']}/results/").json()
    (variant,) = results["metrics_guardrail"][0]["variant_results"]
    assert variant["guardrail_state"] == "clear" and results["guardrail_breaches"] == []
    time.sleep(1.0)
    assert _breach_entries(admin, created["id"]) == []
    assert admin.get(f"{P}/experiments/{created['id']}/").json()["end_date"] is None
