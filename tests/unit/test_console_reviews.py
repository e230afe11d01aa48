"""The approvals and webhooks pages over in-memory data: readable diffs, who sees which button,
labels and escaping, admins only for webhooks, and no secret ever rendered."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.applications import Starlette
from starlette.testclient import TestClient

from flagstaff.accounts.records import Role
from flagstaff.activity.approvals import (
    ApprovalPolicy,
    ChangeRequest,
    RequestKind,
    RequestStatus,
)
from flagstaff.activity.webhooks import Delivery, DeliveryStatus, Webhook
from flagstaff.console.approvals import approval_routes
from flagstaff.console.routes import console_routes
from flagstaff.console.webhooks import webhook_routes
from flagstaff.flags.records import FeatureFlag
from tests.stored_flags import stored_flag
from tests.unit.console_fakes import MemoryAccounts, MemoryData
from tests.unit.test_console import EVIL, FAST, NOW, PASSWORD, _check_accessible, _flag, _login

FLAG = _flag(7, "checkout-v2", version=3)


def _request(id: int, author: int | None, **fields: Any) -> ChangeRequest:
    values: dict[str, Any] = {
        "id": id,
        "project_id": 1,
        "flag_id": 7,
        "body": {**FLAG, "active": False, "name": EVIL},
        "base_version": 3,
        "author_user_id": author,
        "status": RequestStatus.PENDING,
        "created_at_ms": NOW - 1000,
    }
    values.update(fields)
    return ChangeRequest(**values)


class Reviews:
    def __init__(self) -> None:
        self.policy = ApprovalPolicy(enabled=True)
        self.requests = [
            _request(4, 2, base_version=2),  # the flag moved on since
            _request(3, 2),
            _request(2, 1),
            _request(
                1,
                2,
                kind=RequestKind.SCHEDULE,
                base_version=None,
                body={
                    "operation": "update_rollout",
                    "payload": {"operation": "update_rollout", "value": 30},
                    "run_at_ms": NOW + 3_600_000,
                },
            ),
            _request(
                0, 2, status=RequestStatus.APPLIED, decided_by=1, decided_at_ms=NOW, comment=EVIL
            ),
        ]
        self.hooks = [
            Webhook(5, 1, "https://hooks.example/x?<b>", "whsec_SECRET", True, [], EVIL, NOW)
        ]
        self.sent = [
            Delivery(9, 5, 4, DeliveryStatus.FAILED, 7, None, NOW, 500, "answered 500: " + EVIL),
            Delivery(8, 5, 3, DeliveryStatus.PENDING, 1, NOW + 10, NOW, None, "timed out"),
        ]

    async def approval_policy(self, project_id: int) -> ApprovalPolicy:
        return self.policy

    async def change_requests(
        self, project_id: int, status: RequestStatus | None, limit: int
    ) -> list[ChangeRequest]:
        return [r for r in self.requests if status is None or r.status is status][:limit]

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None:
        return stored_flag(FLAG, 7, 3) if flag_id == 7 else None

    async def webhooks(self, project_id: int) -> list[Webhook]:
        return self.hooks

    async def deliveries(self, project_id: int, webhook_id: int, limit: int) -> list[Delivery]:
        return self.sent[:limit]


def _client(role: Role) -> TestClient:
    """Logged in as ada (user 1) with ``role``; user 2 (bob) made most requests."""
    accounts = MemoryAccounts()

    async def setup() -> None:
        ada = await accounts.create_user("ada@example.com", FAST.hash(PASSWORD), 0)
        bob = await accounts.create_user("bob@example.com", FAST.hash(PASSWORD), 0)
        await accounts.set_membership(ada.id, 1, role, 0)
        await accounts.set_membership(bob.id, 1, Role.EDITOR, 0)

    asyncio.run(setup())
    data = Reviews()
    routes = console_routes(
        accounts,
        MemoryData([FLAG]),
        clock=lambda: NOW,
        extra=[
            lambda pages: approval_routes(pages, data),
            lambda pages: webhook_routes(pages, data),
        ],
    )
    client = TestClient(Starlette(routes=routes), base_url="http://console.test")
    _login(client)
    return client


def test_pending_requests_show_their_diff_and_the_buttons_each_person_may_use() -> None:
    page = _client(Role.EDITOR).get("/approvals")
    assert page.status_code == 200
    text = page.text
    parser = _check_accessible(text)
    assert EVIL not in text and "&lt;script&gt;" in text
    assert (
        'Change of <a href="/feature_flags/7">checkout-v2</a>, requested by bob@example.com' in text
    )
    assert "Enabled" in text and "<code>true</code>" in text and "<code>false</code>" in text
    assert "Set the rollout of every condition set to 30%" in text
    # bob's requests: ada may approve; her own: she may only withdraw
    assert "Approve request 3" in parser.buttons and "Reject request 3" in parser.buttons
    assert "Approve request 2" not in parser.buttons and "Withdraw request 2" in parser.buttons
    assert "someone else must approve it" in text
    assert "Save approval policy" not in parser.buttons  # admins only
    assert "applied" in text and "Recent decisions" in text
    assert 'href="/settings/webhooks"' not in text  # the nav shows webhooks to admins only


def test_viewers_see_requests_without_buttons_and_stale_ones_are_flagged() -> None:
    client = _client(Role.VIEWER)
    page = client.get("/approvals").text
    assert "Approve request" not in page and "Reject request" not in page
    assert "Withdraw request 2" in page  # her own, made while she was an editor
    assert page.count("approving it will be refused") == 1
    assert "The flag changed since this request was made" in page


def test_admins_switch_the_policy_and_manage_webhooks() -> None:
    client = _client(Role.ADMIN)
    approvals = client.get("/approvals")
    assert "Save approval policy" in _check_accessible(approvals.text).buttons
    page = client.get("/settings/webhooks")
    assert page.status_code == 200
    parser = _check_accessible(page.text)
    assert "whsec_SECRET" not in page.text and EVIL not in page.text
    assert "https://hooks.example/x?&lt;b&gt;" in page.text
    assert {"Create webhook", "Disable webhook 5", "Delete webhook 5", "Redeliver 9"} <= set(
        parser.buttons
    )
    assert "Redeliver 8" not in parser.buttons  # still pending
    assert "answered 500" in page.text and "no answer: timed out" in page.text
    assert "webhooks.js" in page.text and 'href="/settings/webhooks"' in page.text


def test_webhooks_are_for_admins_only() -> None:
    for role in (Role.EDITOR, Role.VIEWER):
        assert _client(role).get("/settings/webhooks").status_code == 403
