"""Change requests and webhook deliveries in the store, on both backends: a decision and its
change commit together or not at all, deliveries are enqueued with the activity row they are
about (and only then), and a claimed delivery is leased to one worker."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from msgspec.structs import replace

from flagstaff.activity.approvals import ChangeRequest, RequestKind, RequestStatus
from flagstaff.activity.records import Actor, ChangeSource, Trigger
from flagstaff.activity.webhooks import DeliveryStatus, Webhook, after_attempt
from flagstaff.flags.records import FeatureFlag, FlagDefinition, flag_json
from flagstaff.store.base import Conflict, Store
from tests.unit.test_store_contract import Factory, backend, run

__all__ = ["backend"]  # the fixture, shared with the store contract

NOW = 1_700_000_000_000
WHO = ChangeSource(actor=Actor(user_id=None, email="tester"))


async def _project_and_flag(store: Store) -> tuple[int, FeatureFlag]:
    project = await store.create_project("reviews")
    flag = await store.create_flag(
        project.id, FlagDefinition(key="f", active=True, filters={"groups": []}), WHO
    )
    return project.id, flag


def _request(project_id: int, flag: FeatureFlag, **body: Any) -> ChangeRequest:
    return ChangeRequest(
        id=0,
        project_id=project_id,
        flag_id=flag.id,
        body={**flag_json(flag), **body},
        base_version=flag.version,
        author_user_id=None,
        status=RequestStatus.PENDING,
        created_at_ms=NOW,
        kind=RequestKind.UPDATE,
        author_key_id=7,
    )


def test_a_decision_and_its_change_commit_together(backend: Factory) -> None:
    async def body(store: Store) -> None:
        project_id, flag = await _project_and_flag(store)
        made = await store.create_change_request(_request(project_id, flag, active=False), "f", WHO)
        assert made.id > 0 and made.author_key_id == 7 and made.body["active"] is False
        assert (await store.approval_policy(project_id)).enabled is False
        await store.set_approval_policy(project_id, True, WHO, NOW)
        assert (await store.approval_policy(project_id)).enabled is True

        # the flag moves first: applying fails on the version and the request stays pending
        await store.update_flag(project_id, flag.id, replace(flag, name="moved"), 1, WHO)
        applied = msgspec.structs.replace(made, status=RequestStatus.APPLIED, decided_at_ms=NOW)
        trigger = ChangeSource(trigger=Trigger("approval", str(made.id)))
        with pytest.raises(Conflict) as info:
            await store.decide_change_request(applied, "f", WHO, trigger)
        assert info.value.field == "version"
        again = await store.get_change_request(project_id, made.id)
        assert again is not None and again.status is RequestStatus.PENDING
        assert (await store.get_flag(project_id, flag.id) or flag).active is True

        # a fresh request applies, once
        current = await store.get_flag(project_id, flag.id)
        assert current is not None
        second = await store.create_change_request(
            _request(project_id, current, active=False), "f", WHO
        )
        ok = msgspec.structs.replace(second, status=RequestStatus.APPLIED, decided_at_ms=NOW)
        done = await store.decide_change_request(ok, "f", WHO, trigger)
        assert done.status is RequestStatus.APPLIED and done.decided_at_ms == NOW
        now = await store.get_flag(project_id, flag.id)
        assert now is not None and now.active is False
        with pytest.raises(Conflict) as twice:
            await store.decide_change_request(ok, "f", WHO, trigger)
        assert twice.value.field == "status"
        pending = await store.list_change_requests(project_id, RequestStatus.PENDING, None, 10, 0)
        assert [r.id for r in pending.results] == [made.id] and pending.count == 1
        by_flag = await store.list_change_requests(project_id, None, flag.id, 10, 0)
        assert [r.id for r in by_flag.results] == [second.id, made.id]

    run(backend, body)


def test_deliveries_follow_the_activity_and_are_leased_to_one_worker(backend: Factory) -> None:
    async def body(store: Store) -> None:
        project_id, flag = await _project_and_flag(store)
        hook = await store.create_webhook(
            Webhook(
                0, project_id, "http://127.0.0.1:9/x", "whsec_t", True, ["FeatureFlag"], "", NOW
            ),
            WHO,
        )
        assert await store.claim_deliveries(NOW * 2, 10, 60_000) == []  # created before it

        # a write that fails writes no activity and enqueues nothing
        with pytest.raises(Conflict):
            await store.update_flag(project_id, flag.id, flag, 99, WHO)
        assert (await store.list_deliveries(project_id, hook.id, 10, 0)).count == 0

        await store.update_flag(project_id, flag.id, replace(flag, name="x"), 1, WHO)
        page = await store.list_deliveries(project_id, hook.id, 10, 0)
        assert page.count == 1 and page.results[0].event == "feature_flag.updated"
        due = page.results[0].next_attempt_ms
        assert due is not None

        first = await store.claim_deliveries(due, 10, 60_000)
        assert [c.delivery.id for c in first] == [page.results[0].id]
        assert first[0].url == hook.url and first[0].secret == "whsec_t"
        assert b'"feature_flag.updated"' in first[0].body
        assert await store.claim_deliveries(due + 1, 10, 60_000) == []  # leased
        with pytest.raises(Conflict):
            await store.redeliver(project_id, hook.id, first[0].delivery.id, due + 1)

        # the lease runs out: another worker takes the row; the first one's outcome is dropped
        retaken = await store.claim_deliveries(due + 60_000, 10, 60_000)
        assert [c.delivery.id for c in retaken] == [first[0].delivery.id]
        outcome = after_attempt(first[0].delivery, 200, "", due + 60_001)
        assert await store.finish_delivery(outcome, first[0].lease_token) is False
        assert await store.finish_delivery(outcome, retaken[0].lease_token) is True
        stored = (await store.list_deliveries(project_id, hook.id, 10, 0)).results[0]
        assert stored.status is DeliveryStatus.SUCCEEDED and stored.attempts == 1
        assert await store.claim_deliveries(due + 10**9, 10, 60_000) == []

        # disabled: nothing new is enqueued; deleted: its deliveries go with it
        await store.update_webhook(project_id, hook.id, {"enabled": False}, WHO, NOW)
        await store.update_flag(project_id, flag.id, replace(flag, name="y"), 2, WHO)
        assert (await store.list_deliveries(project_id, hook.id, 10, 0)).count == 1
        assert await store.delete_webhook(project_id, hook.id, WHO, NOW) is True
        assert await store.get_webhook(project_id, hook.id) is None
        assert (await store.list_deliveries(project_id, hook.id, 10, 0)).count == 0

    run(backend, body)
