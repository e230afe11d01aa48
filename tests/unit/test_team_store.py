"""What the console's team pages read and change, on both engines (the contract's fixtures):
memberships guarded by the last-admin rule, usage counts, events per minute, persons in id
order, groups by key, the ingestion warnings kept per project."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from flagstaff.accounts.records import Role
from flagstaff.activity.records import Actor, ChangeSource, Scope
from flagstaff.flags.records import FlagDefinition
from flagstaff.store.base import Conflict, NotFound
from flagstaff.store.records import CohortDefinition
from flagstaff.store.rows import WARNINGS_KEPT
from tests.unit.test_store_contract import TOKEN, Factory, backend, drop, ev, run

__all__ = ["backend"]
NOW = 1_800_000_000_000
MINUTE = 60_000


def test_memberships_change_and_keep_an_admin(backend: Factory) -> None:
    async def body(store: Any) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        tag = uuid.uuid4().hex  # users outlive the contract's reset
        ada = await store.create_user(f"ada-{tag}@example.com", "hash", NOW)
        bob = await store.create_user(f"bob-{tag}@example.com", "hash", NOW)
        source = ChangeSource(actor=Actor(user_id=ada.id, email=ada.email))
        made = await store.change_membership(ada.id, pid, Role.ADMIN, NOW, source)
        assert made.role is Role.ADMIN and made.created_at_ms == NOW
        # the only admin can neither step down nor leave
        for role in (Role.EDITOR, None):
            with pytest.raises(Conflict) as refused:
                await store.change_membership(ada.id, pid, role, NOW + 1, source)
            assert refused.value.field == "role"
        await store.change_membership(bob.id, pid, Role.VIEWER, NOW + 2, source)
        promoted = await store.change_membership(bob.id, pid, Role.ADMIN, NOW + 3, source)
        assert promoted.created_at_ms == NOW + 2  # a role change keeps the join time
        assert (await store.change_membership(ada.id, pid, Role.EDITOR, NOW + 4, source)).role
        assert await store.change_membership(ada.id, pid, None, NOW + 5, source) is None
        assert await store.get_membership(ada.id, pid) is None
        assert await store.change_membership(ada.id, pid, None, NOW + 6, source) is None
        with pytest.raises(NotFound):
            await store.change_membership(999_999, pid, Role.VIEWER, NOW, source)
        log = await store.list_activity(pid, scope=Scope.MEMBERSHIP)
        assert [a.record.activity.value for a in reversed(log)] == [
            "created",
            "created",
            "updated",
            "updated",
            "deleted",
        ]
        assert log[0].record.detail.name == ada.email
        assert log[0].record.actor.user_id == ada.id

    run(backend, body)


def test_two_admins_demoting_each_other_at_once_leave_one(backend: Factory) -> None:
    async def body(store: Any) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        ids = []
        for name in ("a", "b"):  # users outlive the contract's reset: unique emails
            user = await store.create_user(f"{name}-{uuid.uuid4().hex}@example.com", "hash", NOW)
            await store.change_membership(user.id, pid, Role.ADMIN, NOW)
            ids.append(user.id)
        outcomes = await asyncio.gather(
            *(store.change_membership(i, pid, Role.VIEWER, NOW + 1) for i in ids),
            return_exceptions=True,
        )
        assert sum(isinstance(o, Conflict) for o in outcomes) == 1, outcomes
        roles = [(await store.get_membership(i, pid)).role for i in ids]
        assert sorted(roles) == [Role.ADMIN, Role.VIEWER]

    run(backend, body)


def test_usage_events_per_minute_persons_and_groups(backend: Factory) -> None:
    async def body(store: Any) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        other = (await store.create_project("Q")).id
        start = NOW - 3 * MINUTE
        events = [ev("a", f"u{i}", ts=start + i * 20_000, set={"n": i}) for i in range(7)]
        events.append(ev("$groupidentify", "u0", ts=start, props={"$group_type": "company",
                      "$group_key": "Acme-EU", "$group_set": {"size": 3}}))  # fmt: skip
        events.append(ev("$groupidentify", "u0", ts=start, props={"$group_type": "company",
                      "$group_key": "globex", "$group_set": {}}))  # fmt: skip
        await store.ingest(pid, events, [])
        await store.ingest(other, [ev("a", "x", ts=start)], [])
        await store.create_flag(pid, FlagDefinition(key="f", filters={"groups": []}))
        await store.create_cohort(
            pid,
            CohortDefinition(
                name="s", description="", filters=None, is_static=True, distinct_ids=["u1"]
            ),
        )

        usage = await store.project_usage(pid, 1000)
        assert (usage.events, usage.persons, usage.flags, usage.cohorts) == (9, 7, 1, 1)
        capped = await store.project_usage(pid, 5)
        assert (capped.events, capped.persons, capped.cap) == (5, 5, 5)

        per_minute = await store.events_per_minute(pid, start - MINUTE, 5, 1000)
        assert per_minute == [0, 5, 3, 1, 0]  # u0-u2 and both group events; u3-u5; u6
        assert await store.events_per_minute(pid, start, 2, 2) == [2, 2]

        first = await store.scan_persons(pid, 0, 4, False)
        assert [p.properties["n"] for p in first] == [0, 1, 2, 3]
        rest = await store.scan_persons(pid, first[-1].id, 100, True)
        assert [p.properties["n"] for p in rest] == [4, 5, 6]
        members = await store.scan_persons(pid, 0, 2, True)
        assert [bool(p.static_cohort_ids) for p in members] == [False, True]

        index = {v: k for k, v in (await store.list_group_types(pid)).items()}["company"]
        keys = [g.group_key for g in await store.list_groups(pid, index, "", 10, 0)]
        assert keys == ["Acme-EU", "globex"]
        found = await store.list_groups(pid, index, "acme", 10, 0)
        assert [g.properties for g in found] == [{"size": 3}]
        assert await store.list_groups(pid, index, "", 10, 1) != []
        assert await store.list_groups(pid, index, "nothing", 10, 0) == []

        cohort = (await store.list_cohorts(pid, 10, 0)).results[0]
        assert await store.static_member_sample(pid, cohort.id, 5) == ["u1"]
        renamed = await store.rename_project(pid, "Renamed")
        assert renamed.name == "Renamed" and (await store.get_project(pid)).name == "Renamed"
        assert await store.rename_project(999_999, "x") is None

    run(backend, body)


def test_ingestion_keeps_the_newest_warnings_per_project(backend: Factory) -> None:
    async def body(store: Any) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        other = (await store.create_project("Q")).id
        await store.ingest(other, [], [drop("kept", 0)])
        await store.ingest(pid, [], [drop("old", i) for i in range(WARNINGS_KEPT - 3)])
        await store.ingest(pid, [], [drop("new", i) for i in range(10)])
        page = await store.list_warnings(pid, WARNINGS_KEPT + 10, 0)
        assert page.count == WARNINGS_KEPT == len(page.results)
        assert [w.type for w in page.results[:10]] == ["new"] * 10
        assert page.results[-1].details["detail"] == "detail 7"  # the 7 oldest went
        assert (await store.list_warnings(other, 10, 0)).count == 1

    run(backend, body)
