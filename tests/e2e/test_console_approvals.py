"""Approvals and webhooks in a real browser against the real server (SQLite or PostgreSQL by
``FLAGSTAFF_TEST_BACKEND``): an admin turns approvals on, an editor's save becomes a request
while /flags keeps the old value, a second person approves it in the console and /flags
follows; an admin adds a webhook (its secret shown once) and sees its deliveries."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest

from flagstaff.activity.webhooks import SIGNATURE_HEADER
from tests.e2e.test_console_editor import (
    ADMIN_EMAIL,
    EDITOR_EMAIL,
    PASSWORD,
    _cli,
    _log_in,
    browser,
    page,
)
from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Server
from tests.webhook_receiver import Receiver, verify_signature

__all__ = ["browser", "page"]  # the browser fixtures of the console's journeys

P = "/api/projects/@current"
SECOND_EMAIL = "second@example.com"


class Console:
    def __init__(self, server: Server, flag: dict[str, Any], receiver: Receiver) -> None:
        self.server = server
        self.url = server.url
        self.flag = flag
        self.receiver = receiver
        self.api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {PERSONAL_KEY}"}, timeout=30
        )

    def flags_answer(self) -> bool:
        answer = httpx.post(
            f"{self.url}/flags?v=2", json={"api_key": PROJECT_TOKEN, "distinct_id": "ann"}
        )
        assert answer.status_code == 200, answer.text
        shown = answer.json()["flags"].get(self.flag["key"])  # an inactive flag is not listed
        return bool(shown and shown["enabled"])

    def stored_flag(self) -> dict[str, Any]:
        return dict(self.api.get(f"{P}/feature_flags/{self.flag['id']}/").json())


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    receiver = Receiver()
    server = Server(
        tmp_path_factory.mktemp("approvals-console") / "data",
        env={
            "FLAGSTAFF_INIT_ADMIN_EMAIL": ADMIN_EMAIL,
            "FLAGSTAFF_INIT_ADMIN_PASSWORD": PASSWORD,
            "FLAGSTAFF_WEBHOOK_RETRY_DELAYS": "0.2",
        },
    ).start()
    try:
        for email in (EDITOR_EMAIL, SECOND_EMAIL):
            _cli(
                server,
                "user",
                "create",
                "--email",
                email,
                "--password",
                PASSWORD,
                "--role",
                "editor",
            )
        made = httpx.post(
            f"{server.url}{P}/feature_flags/",
            headers={"Authorization": f"Bearer {PERSONAL_KEY}"},
            json={"key": "new-onboarding", "filters": {"groups": [{"rollout_percentage": 100}]}},
        )
        assert made.status_code == 201, made.text
        yield Console(server, made.json(), receiver)
    finally:
        server.stop()
        receiver.close()


def _log_out(page: Any) -> None:
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r".*/login.*"))


def _eventually(read: Any, expected: Any) -> None:
    for _ in range(100):  # the workers' definitions refresh within 0.2 s
        if read() == expected:
            return
        time.sleep(0.05)
    assert read() == expected


def test_a_change_waits_for_a_second_person(page: Any, console: Console) -> None:
    assert console.flags_answer() is True
    # The admin turns approvals on.
    _log_in(page, console.url, ADMIN_EMAIL)
    page.get_by_role("link", name="Approvals").click()
    page.wait_for_url(f"{console.url}/approvals")
    page.get_by_label("Require a second person's approval for flag changes").check()
    page.get_by_role("button", name="Save approval policy").click()
    page.get_by_text("Flag changes in Default project need approval").wait_for()
    assert console.api.get(f"{P}/approval_policy/").json()["enabled"] is True
    _log_out(page)

    # An editor turns the flag off: the save becomes a request, nothing is live yet.
    _log_in(page, console.url, EDITOR_EMAIL)
    page.goto(f"{console.url}/feature_flags/{console.flag['id']}")
    page.get_by_label("Enabled").uncheck()
    page.get_by_role("button", name="Save feature flag").click()
    note = page.locator("[data-note]")
    note.get_by_text("it goes live once someone else approves it").wait_for()
    assert page.url == f"{console.url}/feature_flags/{console.flag['id']}"
    assert console.stored_flag()["active"] is True
    assert console.flags_answer() is True
    note.get_by_role("link", name="See the requests waiting for approval").click()
    page.wait_for_url(f"{console.url}/approvals")
    requests = console.api.get(f"{P}/change_requests/", params={"status": "pending"}).json()
    request_id = requests["results"][0]["id"]
    assert page.get_by_role("button", name=f"Withdraw request {request_id}").is_visible()
    assert page.get_by_role("button", name=f"Approve request {request_id}").count() == 0
    _log_out(page)
    assert console.flags_answer() is True

    # A second editor reads the diff and approves: /flags follows.
    _log_in(page, console.url, SECOND_EMAIL)
    page.goto(f"{console.url}/approvals")
    item = page.locator(f'[data-change-request="{request_id}"]')
    assert f"requested by {EDITOR_EMAIL}" in item.inner_text()
    diff = item.get_by_role("table")
    assert diff.get_by_role("row", name=re.compile(r"Enabled\s+true\s+false")).is_visible()
    item.get_by_label(f"Comment on request {request_id} (optional)").fill("ship it")
    item.get_by_role("button", name=f"Approve request {request_id}").click()
    page.get_by_text("No change is waiting for approval.").wait_for()
    assert "applied" in page.get_by_role("table").inner_text()
    assert console.stored_flag()["active"] is False
    _eventually(console.flags_answer, False)

    page.goto(f"{console.url}/feature_flags/{console.flag['id']}/history")
    history = page.locator("[data-flag-history]").inner_text()
    assert f"Updated by {EDITOR_EMAIL}, approved by {SECOND_EMAIL}" in history
    _log_out(page)
    console.api.patch(f"{P}/approval_policy/", json={"enabled": False})


def test_an_admin_adds_a_webhook_and_sees_its_deliveries(page: Any, console: Console) -> None:
    _log_in(page, console.url, ADMIN_EMAIL)
    page.get_by_role("link", name="Webhooks").click()
    page.wait_for_url(f"{console.url}/settings/webhooks")
    page.get_by_label("Webhook URL (http:// or https://)").fill(console.receiver.url("/console"))
    page.get_by_label("Description").fill("release channel")
    page.get_by_label("FeatureFlag").check()
    page.get_by_role("button", name="Create webhook").click()
    secret_box = page.get_by_label("New webhook's signing secret")
    secret_box.wait_for()
    secret = secret_box.input_value()
    assert secret.startswith("whsec_")

    console.receiver.plans["/console"] = [500]  # the first try fails, the retry succeeds
    changed = console.api.patch(
        f"{P}/feature_flags/{console.flag['id']}/", json={"name": "From the webhook test"}
    )
    assert changed.status_code == 200, changed.text
    got = console.receiver.wait("/console", 2)
    last = got[-1]
    assert verify_signature(secret, last.headers[SIGNATURE_HEADER], last.body, int(time.time()))
    assert msgspec.json.decode(last.body)["event"] == "feature_flag.updated"

    for _ in range(100):  # the outcome is recorded just after the receiver answered
        page.reload()
        if "succeeded" in page.locator("[data-webhooks]").inner_text():
            break
        time.sleep(0.1)
    listed = page.locator("[data-webhooks]").inner_text()
    assert "release channel" in listed and "feature_flag.updated" in listed
    assert "succeeded" in listed and secret not in page.content()
    redeliver = page.get_by_role("button", name=re.compile(r"^Redeliver \d+$"))
    redeliver.click()
    console.receiver.wait("/console", 3)

    hook_id = console.api.get(f"{P}/webhooks/").json()["results"][0]["id"]
    page.get_by_role("button", name=f"Disable webhook {hook_id}").click()
    page.get_by_role("button", name=f"Enable webhook {hook_id}").wait_for()
    assert console.api.get(f"{P}/webhooks/{hook_id}/").json()["enabled"] is False
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name=f"Delete webhook {hook_id}").click()
    page.get_by_text("No webhooks yet.").wait_for()
