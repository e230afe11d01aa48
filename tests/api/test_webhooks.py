"""Outgoing webhooks against the real server (SQLite or PostgreSQL) and a receiver in this
process: deliveries are signed (checked with ``verify_signature``), enqueued with the activity
they are about, retried on failure by the configured schedule (a fraction of a second here),
sent once per activity row by two workers, visible and redeliverable; admins only."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest

from flagstaff.activity.webhooks import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER
from flagstaff.http import approval_schemas
from tests.api.people import PASSWORD, make_user, user_api
from tests.server import Api, Server
from tests.webhook_receiver import Receiver, verify_signature

P = "/api/projects/@current"
ADMIN = "admin@example.com"


class Setup:
    def __init__(self, server: Server, receiver: Receiver) -> None:
        self.server = server
        self.receiver = receiver
        self.api = Api(server.url)  # the init key: admin of the project
        make_user(server, "editor@example.com", "editor")
        self.admin = user_api(server, ADMIN)
        self.editor = user_api(server, "editor@example.com")

    def hook(self, path: str, **fields: Any) -> dict[str, Any]:
        made = self.admin.post(f"{P}/webhooks/", json={"url": self.receiver.url(path), **fields})
        assert made.status_code == 201, made.text
        return dict(made.json())

    def deliveries(self, hook_id: int) -> list[dict[str, Any]]:
        page = self.admin.get(f"{P}/webhooks/{hook_id}/deliveries/")
        assert page.status_code == 200, page.text
        msgspec.convert(page.json(), approval_schemas.WebhookDeliveryPage)
        return list(page.json()["results"])

    def settled(self, hook_id: int, count: int, status: str) -> list[dict[str, Any]]:
        """The webhook's deliveries once ``count`` of them have ``status``."""
        for _ in range(400):
            found = self.deliveries(hook_id)
            if sum(d["status"] == status for d in found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"never {count} {status}: {self.deliveries(hook_id)}")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    receiver = Receiver()
    server = Server(
        tmp_path_factory.mktemp("webhooks") / "data",
        workers=2,
        env={
            "FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN,
            "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD,
            "FLAGSTAFF_WEBHOOK_RETRY_DELAYS": "0.2,0.3",
        },
    ).start()
    try:
        yield Setup(server, receiver)
    finally:
        server.stop()
        receiver.close()


def _error(answer: httpx.Response, status: int, code: str, attr: str | None = None) -> None:
    assert answer.status_code == status, answer.text
    assert (answer.json()["code"], answer.json()["attr"]) == (code, attr), answer.text


def _flag(api: Api) -> dict[str, Any]:
    return api.create_flag(key=f"wh-{uuid.uuid4().hex[:8]}", filters={"groups": []})


def test_webhooks_are_for_admins_and_checked(setup: Setup) -> None:
    hooks = f"{P}/webhooks/"
    good = setup.receiver.url("/checked")
    _error(setup.editor.get(hooks), 403, "permission_denied")
    _error(setup.editor.post(hooks, json={"url": good}), 403, "permission_denied")
    _error(setup.admin.post(hooks, json={}), 400, "required", "url")
    _error(setup.admin.post(hooks, json=[good]), 400, "invalid_input")
    for url in ("ftp://example.com/x", "file:///etc/passwd", "https://u:p@example.com/", 7):
        _error(setup.admin.post(hooks, json={"url": url}), 400, "invalid_input", "url")
    _error(
        setup.admin.post(hooks, json={"url": good, "scopes": ["Nope"]}),
        400,
        "invalid_input",
        "scopes",
    )
    _error(
        setup.admin.post(hooks, json={"url": good, "enabled": "yes"}),
        400,
        "invalid_input",
        "enabled",
    )
    _error(
        setup.admin.post(hooks, json={"url": good, "description": "x" * 501}),
        400,
        "invalid_input",
        "description",
    )
    made = setup.hook("/checked", scopes=["Cohort"], description="ops channel")
    msgspec.convert(made, approval_schemas.CreatedWebhook)
    assert made["secret"].startswith("whsec_") and made["enabled"] is True
    shown = setup.admin.get(f"{hooks}{made['id']}/").json()
    assert "secret" not in shown and shown["scopes"] == ["Cohort"]
    listed = setup.admin.get(hooks).json()
    msgspec.convert(listed, approval_schemas.WebhookPage)
    assert made["id"] in [h["id"] for h in listed["results"]]
    assert all("secret" not in h for h in listed["results"])
    _error(
        setup.admin.patch(f"{hooks}{made['id']}/", json={"url": "gopher://x"}),
        400,
        "invalid_input",
        "url",
    )
    _error(
        setup.admin.patch(f"{hooks}{made['id']}/", json={"rotate_secret": 1}),
        400,
        "invalid_input",
        "rotate_secret",
    )
    _error(setup.admin.get(f"{hooks}999999/"), 404, "not_found")
    assert setup.admin.delete(f"{hooks}{made['id']}/").status_code == 204
    _error(setup.admin.get(f"{hooks}{made['id']}/"), 404, "not_found")
    _error(setup.admin.get(f"{hooks}{made['id']}/deliveries/"), 404, "not_found")


def test_a_change_is_delivered_signed(setup: Setup) -> None:
    hook = setup.hook("/signed", scopes=["FeatureFlag"])
    flag = _flag(setup.editor)
    got = setup.receiver.wait("/signed", 1)
    sent = got[0]
    assert verify_signature(
        hook["secret"], sent.headers[SIGNATURE_HEADER], sent.body, int(time.time())
    )
    assert not verify_signature(
        "whsec_other", sent.headers[SIGNATURE_HEADER], sent.body, int(time.time())
    )
    assert sent.headers[EVENT_HEADER] == "feature_flag.created"
    body = msgspec.json.decode(sent.body)
    assert body["event"] == "feature_flag.created"
    assert body["activity"]["item_id"] == str(flag["id"])
    assert body["activity"]["user"]["email"] == "editor@example.com"
    delivery = setup.settled(hook["id"], 1, "succeeded")[0]
    assert sent.headers[DELIVERY_HEADER] == str(delivery["id"])
    assert delivery["attempts"] == 1 and delivery["last_status_code"] == 200
    assert delivery["event"] == "feature_flag.created" and delivery["last_duration_ms"] >= 0
    # the webhook's own creation (scope Webhook) was not sent: it is not subscribed to it
    assert len(setup.receiver.at("/signed")) == 1

    rotated = setup.admin.patch(f"{P}/webhooks/{hook['id']}/", json={"rotate_secret": True})
    assert rotated.status_code == 200 and rotated.json()["secret"] != hook["secret"]
    setup.editor.patch(f"{P}/feature_flags/{flag['id']}/", json={"name": "renamed"})
    again = setup.receiver.wait("/signed", 2)[1]
    assert again.headers[EVENT_HEADER] == "feature_flag.updated"
    header = again.headers[SIGNATURE_HEADER]
    assert verify_signature(rotated.json()["secret"], header, again.body, int(time.time()))
    assert not verify_signature(hook["secret"], header, again.body, int(time.time()))
    setup.admin.delete(f"{P}/webhooks/{hook['id']}/")


def test_failures_are_retried_by_the_schedule_then_given_up(setup: Setup) -> None:
    flaky = setup.hook("/flaky", scopes=["Cohort"])
    setup.receiver.plans["/flaky"] = [500, 503]
    setup.api.post(f"{P}/cohorts/", json={"name": "retried", "is_static": True})
    got = setup.receiver.wait("/flaky", 3)
    assert len({r.headers[DELIVERY_HEADER] for r in got}) == 1
    assert len({r.body for r in got}) == 1  # every retry sends the same bytes
    done = setup.settled(flaky["id"], 1, "succeeded")[0]
    assert done["attempts"] == 3 and done["last_status_code"] == 200

    down = setup.hook("/down", scopes=["Cohort"])
    setup.receiver.plans["/down"] = [500] * 3 + [404]
    setup.api.post(f"{P}/cohorts/", json={"name": "failing", "is_static": True})
    failed = setup.settled(down["id"], 1, "failed")[0]
    assert failed["attempts"] == 3  # the first try and the two configured retries
    assert failed["last_status_code"] == 500 and "nope" in failed["last_error"]
    assert failed["next_attempt_at"] is None
    assert len(setup.receiver.at("/down")) == 3

    # redelivery: one new try, a 404 is not retried
    again = setup.admin.post(
        f"{P}/webhooks/{down['id']}/deliveries/{failed['id']}/redeliver/", json={}
    )
    assert again.status_code == 202, again.text
    msgspec.convert(again.json(), approval_schemas.WebhookDelivery)
    assert again.json()["status"] == "pending" and again.json()["attempts"] == 0
    refailed = setup.settled(down["id"], 1, "failed")
    setup.receiver.wait("/down", 4)
    assert refailed[0]["attempts"] == 1 and refailed[0]["last_status_code"] == 404
    setup.receiver.plans["/down"] = []
    setup.admin.post(f"{P}/webhooks/{down['id']}/deliveries/{failed['id']}/redeliver/", json={})
    assert setup.settled(down["id"], 1, "succeeded")[0]["attempts"] == 1
    _error(
        setup.admin.post(f"{P}/webhooks/{down['id']}/deliveries/999999/redeliver/", json={}),
        404,
        "not_found",
    )
    _error(
        setup.editor.post(f"{P}/webhooks/{down['id']}/deliveries/{failed['id']}/redeliver/"),
        403,
        "permission_denied",
    )
    for hook in (flaky, down):
        setup.admin.delete(f"{P}/webhooks/{hook['id']}/")


def test_each_change_is_sent_once_by_two_workers(setup: Setup) -> None:
    hook = setup.hook("/once", scopes=["Cohort"])
    for i in range(12):
        made = setup.api.post(f"{P}/cohorts/", json={"name": f"once {i}", "is_static": True})
        assert made.status_code == 201
    got = setup.receiver.wait("/once", 12)
    setup.settled(hook["id"], 12, "succeeded")
    time.sleep(1.5)  # more than a poll of both workers: nothing is sent again
    ids = [r.headers[DELIVERY_HEADER] for r in setup.receiver.at("/once")]
    assert len(ids) == len(set(ids)) == 12 == len(got)
    names = {msgspec.json.decode(r.body)["activity"]["detail"]["name"] for r in got}
    assert names == {f"once {i}" for i in range(12)}
    setup.admin.delete(f"{P}/webhooks/{hook['id']}/")


def test_a_disabled_webhook_is_sent_nothing(setup: Setup) -> None:
    hook = setup.hook("/quiet", scopes=["Cohort"])
    off = setup.admin.patch(f"{P}/webhooks/{hook['id']}/", json={"enabled": False})
    assert off.status_code == 200 and off.json()["enabled"] is False and "secret" not in off.json()
    setup.api.post(f"{P}/cohorts/", json={"name": "unheard", "is_static": True})
    assert setup.deliveries(hook["id"]) == []
    log = setup.admin.get(f"{P}/activity_log/", params={"scope": "Webhook"}).json()["results"]
    assert log[0]["item_id"] == str(hook["id"]) and log[0]["activity"] == "updated"
    assert "secret" not in str(log[0]["detail"])
    setup.admin.delete(f"{P}/webhooks/{hook['id']}/")


def test_change_requests_reach_webhooks(setup: Setup) -> None:
    hook = setup.hook("/reviews", scopes=["ChangeRequest"])
    flag = _flag(setup.editor)
    assert setup.admin.patch(f"{P}/approval_policy/", json={"enabled": True}).status_code == 200
    try:
        held = setup.editor.patch(f"{P}/feature_flags/{flag['id']}/", json={"active": False})
        assert held.status_code == 202
        sent = setup.receiver.wait("/reviews", 1)[0]
        body = msgspec.json.decode(sent.body)
        assert body["event"] == "change_request.created"
        assert body["activity"]["item_id"] == str(held.json()["id"])
    finally:
        setup.admin.patch(f"{P}/approval_policy/", json={"enabled": False})
        setup.admin.delete(f"{P}/webhooks/{hook['id']}/")
