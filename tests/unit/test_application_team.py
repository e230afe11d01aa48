"""The team's use cases without a server: a body is checked whole before anything is written,
and the refusals keep the API's codes and fields (``application/accounts.py``, ``approvals.py``,
``webhooks.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from flagstaff.accounts.records import ApiKeyInfo, Role
from flagstaff.accounts.roles import AuthMethod, Principal
from flagstaff.activity.approvals import ChangeRequest, RequestStatus
from flagstaff.activity.webhooks import Webhook
from flagstaff.application import accounts, approvals, webhooks
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import UNSET, decode
from flagstaff.store.records import Page, Project


class Projects:
    """A ProjectStore of one project that records the writes."""

    def __init__(self) -> None:
        self.project = Project(1, "uuid", "Shop", "phc_x", "2026-01-01T00:00:00Z")
        self.writes: list[tuple[str, Any]] = []

    async def create_project(self, name: str) -> Project:
        self.writes.append(("create", name))
        return Project(2, "uuid2", name, "phc_y", "2026-01-01T00:00:00Z")

    async def get_project(self, project_id: int) -> Project | None:
        return self.project if project_id == 1 else None

    async def rename_project(self, project_id: int, name: str) -> Project | None:
        self.writes.append(("name", name))
        return Project(1, "uuid", name, "phc_x", "2026-01-01T00:00:00Z")

    async def get_event_retention(self, project_id: int) -> int | None:
        return None

    async def set_event_retention(self, project_id: int, days: int | None) -> bool:
        self.writes.append(("retention", days))
        return True

    async def get_experiment_stats_defaults(self, project_id: int) -> dict[str, Any]:
        return {}

    async def set_experiment_stats_defaults(
        self, project_id: int, defaults: dict[str, Any]
    ) -> bool:
        self.writes.append(("stats", defaults))
        return True


def _caller(store: Any) -> Caller[Any]:
    principal = Principal(1, Role.ADMIN, AuthMethod.PERSONAL_KEY)
    return Caller(store=store, accounts=store, project_id=1, principal=principal)


def _refused(coro: Any) -> ApiError:
    with pytest.raises(ApiError) as refused:
        asyncio.run(coro)
    return refused.value


def test_a_project_update_is_checked_whole_before_anything_is_written() -> None:
    store = Projects()
    body = decode(
        accounts.ProjectUpdate,
        {"experiment_stats_defaults": {}, "name": "Store", "event_retention_days": 0},
    )
    error = _refused(accounts.update_project(_caller(store), body))
    assert (error.status, error.attr) == (400, "event_retention_days")
    assert store.writes == []
    error = _refused(accounts.update_project(_caller(store), decode(accounts.ProjectUpdate, {})))
    assert (error.code, error.attr) == ("required", "name")
    too_long = decode(accounts.ProjectUpdate, {"name": "x" * 201})
    assert _refused(accounts.update_project(_caller(store), too_long)).attr == "name"
    done = asyncio.run(
        accounts.update_project(
            _caller(store), decode(accounts.ProjectUpdate, {"name": "  Store ", "x": 1})
        )
    )
    assert done.project.name == "Store" and store.writes == [("name", "Store")]
    assert (done.event_retention_days, done.experiment_stats_defaults) == (None, {})
    assert list(accounts.project_settings_json(done)) == [
        "id",
        "uuid",
        "name",
        "api_token",
        "created_at",
        "event_retention_days",
        "experiment_stats_defaults",
    ]


def test_a_new_project_needs_a_name() -> None:
    store = Projects()
    blank = accounts.ProjectInput("  ")
    assert _refused(accounts.new_project(store, blank)).code == "required"
    assert asyncio.run(accounts.new_project(store, accounts.ProjectInput(" Two "))).name == "Two"


def test_the_policy_body_needs_a_boolean_enabled() -> None:
    for body in ({}, {"enabled": "yes"}, {"enabled": None}):
        with pytest.raises(ApiError) as refused:
            approvals.policy_input(body)
        assert (refused.value.code, refused.value.attr) == ("required", "enabled")
    assert approvals.policy_input({"enabled": False, "other": 1}).enabled is False
    with pytest.raises(ApiError) as long:
        decode(approvals.DecisionInput, {"comment": "x" * 1001})
    assert long.value.attr == "comment"


class Hooks:
    """A WebhookStore without webhooks that refuses to be written to."""

    async def list_webhooks(self, project_id: int) -> list[Any]:
        return []

    async def create_webhook(self, webhook: Any, source: Any) -> Any:
        raise AssertionError("a refused webhook was written")


@pytest.mark.parametrize(
    ("body", "code", "attr"),
    [
        ({}, "required", "url"),
        ({"url": "ftp://example.com/"}, "invalid_input", "url"),
        ({"url": "https://example.com/", "scopes": ["Nope"]}, "invalid_input", "scopes"),
        ({"url": "https://example.com/", "enabled": "yes"}, "invalid_input", "enabled"),
        ({"url": "https://example.com/", "description": "x" * 501}, "invalid_input", "description"),
    ],
)
def test_a_webhook_body_is_refused_naming_its_field(
    body: dict[str, Any], code: str, attr: str
) -> None:
    try:
        hook = decode(webhooks.WebhookInput, body)
    except ApiError as refused:
        assert (refused.code, refused.attr) == (code, attr)
        return
    error = _refused(webhooks.create_webhook(_caller(Hooks()), hook))
    assert (error.code, error.attr) == (code, attr)


def test_a_webhook_update_takes_any_field_and_checks_rotate_secret() -> None:
    assert decode(webhooks.WebhookUpdate, {}).url is UNSET
    with pytest.raises(ApiError) as refused:
        decode(webhooks.WebhookUpdate, {"rotate_secret": 1})
    assert (refused.value.code, refused.value.attr) == ("invalid_input", "rotate_secret")


class Keys:
    """An account store's personal API keys of project 1, in the order they were made."""

    def __init__(self) -> None:
        self.keys = [ApiKeyInfo(i, 1, f"k{i}", "phx_", "phx_...", 1000 * i, 1) for i in (1, 2)]

    async def list_keys(self, project_id: int, user_id: int | None) -> list[ApiKeyInfo]:
        return list(self.keys)

    async def create_user_key(
        self, project_id: int, user_id: int | None, label: str, now_ms: int, source: Any = None
    ) -> tuple[ApiKeyInfo, str]:
        made = ApiKeyInfo(3, project_id, label, "phx_", "phx_...", now_ms, user_id)
        self.keys.append(made)
        return made, "phx_secret"


def test_keys_are_records_newest_first_and_a_new_one_carries_its_value() -> None:
    store = Keys()
    listed = asyncio.run(accounts.list_keys(_caller(store)))
    assert [k.id for k in listed] == [2, 1]
    created = asyncio.run(accounts.create_key(_caller(store), accounts.PersonalApiKeyInput(" ci ")))
    assert (created.key.id, created.key.label, created.value) == (3, "ci", "phx_secret")
    answer = accounts.created_key_json(created)
    assert list(answer)[-1] == "value" and answer["value"] == "phx_secret"
    assert answer["id"] == 3 and answer["revoked"] is False


def _change_request(request_id: int, status: RequestStatus) -> ChangeRequest:
    return ChangeRequest(request_id, 1, 7, {"key": "f", "active": False}, 4, 1, status, 1_000)


class Requests:
    """An ApprovalStore's reads: two pending requests and a rejected one on flag 7."""

    def __init__(self) -> None:
        self.flag_reads = 0
        self.requests = [
            _change_request(3, RequestStatus.PENDING),
            _change_request(2, RequestStatus.PENDING),
            _change_request(1, RequestStatus.REJECTED),
        ]

    async def list_change_requests(
        self, project_id: int, status: Any, flag_id: Any, limit: int, offset: int
    ) -> Page:
        return Page(len(self.requests), self.requests[offset : offset + limit])

    async def get_change_request(self, project_id: int, request_id: int) -> Any:
        return next((r for r in self.requests if r.id == request_id), None)

    async def get_flag(self, project_id: int, flag_id: int) -> dict[str, Any] | None:
        self.flag_reads += 1
        return {"id": 7, "key": "f", "active": True, "version": 4}


def test_change_requests_are_records_with_their_flag_read_once() -> None:
    store = Requests()
    page = asyncio.run(approvals.list_requests(_caller(store), None, None, 10, 0))
    assert page.count == 3 and [r.request.id for r in page.results] == [3, 2, 1]
    assert store.flag_reads == 1 and page.results[0].current == {
        "id": 7,
        "key": "f",
        "active": True,
        "version": 4,
    }
    shown = approvals.request_with_flag_json(page.results[0])
    assert shown["changes"] and shown["status"] == "pending"
    assert approvals.request_with_flag_json(page.results[2])["changes"] is None  # decided
    one = asyncio.run(approvals.get_request(_caller(store), 1))
    assert one.request.status is RequestStatus.REJECTED and one.current is not None


class StoredHooks:
    """A WebhookStore keeping its webhooks in a dict."""

    def __init__(self) -> None:
        self.hooks: dict[int, Webhook] = {}

    async def list_webhooks(self, project_id: int) -> list[Webhook]:
        return list(self.hooks.values())

    async def get_webhook(self, project_id: int, webhook_id: int) -> Webhook | None:
        return self.hooks.get(webhook_id)

    async def create_webhook(self, webhook: Webhook, source: Any) -> Webhook:
        made = msgspec.structs.replace(webhook, id=len(self.hooks) + 1)
        self.hooks[made.id] = made
        return made

    async def update_webhook(
        self, project_id: int, webhook_id: int, changes: dict[str, Any], source: Any, now: int
    ) -> Webhook | None:
        changed = msgspec.structs.replace(self.hooks[webhook_id], **changes)
        self.hooks[webhook_id] = changed
        return changed


def test_a_webhook_is_answered_as_a_record_with_its_secret_once() -> None:
    store = StoredHooks()
    body = decode(webhooks.WebhookInput, {"url": "https://example.com/", "scopes": ["Cohort"]})
    created = asyncio.run(webhooks.create_webhook(_caller(store), body))
    assert created.webhook.id == 1 and created.secret == created.webhook.secret
    answer = webhooks.created_webhook_json(created)
    assert list(answer)[-1] == "secret" and answer["secret"] == created.secret
    plain = decode(webhooks.WebhookUpdate, {"enabled": False})
    updated = asyncio.run(webhooks.update_webhook(_caller(store), 1, plain))
    assert updated.webhook.enabled is False and updated.new_secret is None
    assert "secret" not in webhooks.updated_webhook_json(updated)
    rotate = decode(webhooks.WebhookUpdate, {"rotate_secret": True})
    rotated = asyncio.run(webhooks.update_webhook(_caller(store), 1, rotate))
    assert rotated.new_secret not in (None, created.secret)
    assert rotated.new_secret == rotated.webhook.secret
    assert webhooks.updated_webhook_json(rotated)["secret"] == rotated.new_secret
