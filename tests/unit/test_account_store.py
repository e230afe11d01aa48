"""The AccountStore, activity log and scheduled changes on both engines (the contract's
fixtures: a fresh SQLite file, or the test PostgreSQL reset)."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.structs import replace

from flagstaff.accounts.records import LoginAttempt, Role
from flagstaff.activity.records import Activity, Actor, ChangeSource, Scope
from flagstaff.activity.scheduled import Operation
from flagstaff.application.accounts import housekeeping
from flagstaff.application.flags import flag_from_input, run_due_changes
from flagstaff.store.base import Conflict
from tests.unit.test_store_contract import TOKEN, Factory, backend, run

__all__ = ["backend"]
NOW = 1_800_000_000_000
DAY = 86_400_000


def test_users_memberships_sessions_and_housekeeping(backend: Factory) -> None:
    async def body(store: Any) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        user = await store.create_user("a@example.com", "hash", NOW)
        with pytest.raises(Conflict):
            await store.create_user("a@example.com", "other", NOW)
        assert (await store.find_user_by_email("a@example.com")).id == user.id
        await store.set_membership(user.id, pid, Role.VIEWER, NOW)
        await store.set_membership(user.id, pid, Role.EDITOR, NOW + 1)  # a role change
        membership = await store.get_membership(user.id, pid)
        assert membership.role is Role.EDITOR and membership.created_at_ms == NOW
        assert [u.email for u, _ in await store.list_members(pid)] == ["a@example.com"]
        old = await store.create_session(user.id, "old", NOW - 20 * DAY, NOW - 6 * DAY, "", "")
        await store.create_session(user.id, "new", NOW, NOW + 14 * DAY, "1.2.3.4", "ua")
        await store.record_login_attempt(LoginAttempt("a@example.com", "ip", NOW - DAY, False))
        await store.record_login_attempt(LoginAttempt("a@example.com", "ip", NOW, True))
        await housekeeping(store, NOW)
        assert await store.find_session("old") is None
        assert (await store.find_session("new")).ip == "1.2.3.4"
        attempts = await store.recent_login_attempts("a@example.com", "x", 0)
        assert [a.succeeded for a in attempts] == [True]
        assert await store.delete_user_sessions(user.id, None) == 1
        assert old.id != 0

    run(backend, body)


def test_keys_revocation_and_their_activity(backend: Factory) -> None:
    async def body(store: Any) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        user = await store.create_user("k@example.com", "hash", NOW)
        source = ChangeSource(actor=Actor(user_id=user.id, email="k@example.com"))
        info, secret = await store.create_user_key(pid, user.id, "ci", NOW, source)
        assert info.prefix == secret[:8] and info.user_id == user.id
        assert (await store.find_personal_key(secret)) is not None
        revoked = await store.revoke_key(pid, info.id, NOW + 5, source)
        assert revoked.revoked_at_ms == NOW + 5
        assert await store.find_personal_key(secret) is None  # the definitions endpoint
        assert (await store.find_key(secret)).revoked  # the API, to refuse it by name
        log = await store.list_activity(pid, scope=Scope.PERSONAL_API_KEY)
        assert [e.record.activity for e in log] == [Activity.REVOKED, Activity.CREATED]
        assert log[0].record.actor.email == "k@example.com"

    run(backend, body)


def test_flag_writes_log_activity_and_versions_and_scheduled_changes_run_once(
    backend: Factory,
) -> None:
    async def body(store: Any) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        flag = await store.create_flag(pid, flag_from_input({"key": "f"}))
        updated = await store.update_flag(pid, flag.id, replace(flag, name="renamed"), 1)
        versions = await store.flag_versions(pid, flag.id)
        assert [v.version for v in versions] == [1, 2]
        assert versions[1].data["name"] == "renamed"
        assert await store.count_activity(pid, Scope.FEATURE_FLAG, str(flag.id)) == 2
        page = await store.list_activity(pid, limit=1)
        older = await store.list_activity(pid, before_id=page[0].id)
        assert page[0].record.activity is Activity.UPDATED
        assert [e.record.activity for e in older] == [Activity.CREATED]
        change = await store.create_scheduled_change(
            pid,
            flag.id,
            Operation.UPDATE_STATUS,
            {"operation": "update_status", "value": False},
            NOW + 1000,
            None,
            NOW,
        )
        assert await run_due_changes(store, NOW) == 0  # not due yet
        bumps: list[int] = []
        assert await run_due_changes(store, NOW + 1000, lambda: bumps.append(1)) == 1
        assert await run_due_changes(store, NOW + 2000) == 0  # claimed once
        failures = [c.failure for c in await store.list_scheduled_changes(pid, flag.id)]
        assert bumps == [1], failures
        current = await store.get_flag(pid, flag.id)
        assert current.active is False and current.version == updated.version + 1
        [listed] = await store.list_scheduled_changes(pid, flag.id)
        assert listed.id == change.id and listed.executed_at_ms == NOW + 1000
        assert listed.failure is None
        newest = (await store.list_activity(pid, scope=Scope.FEATURE_FLAG, limit=1))[0]
        assert newest.record.detail.trigger is not None
        assert newest.record.detail.trigger.job_type == "scheduled_change"

    run(backend, body)
