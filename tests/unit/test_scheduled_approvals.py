"""Scheduled changes and approvals: pure decisions, applied by the store pass."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from flagstaff.accounts.records import Role
from flagstaff.accounts.roles import AuthMethod, Principal
from flagstaff.activity import approvals, scheduled

NOW = 1_000_000


def _flag() -> dict[str, Any]:
    return {
        "id": 5,
        "key": "beta",
        "active": True,
        "version": 3,
        "filters": {
            "groups": [
                {"properties": [{"key": "plan", "value": ["pro"]}], "rollout_percentage": 10},
                {"properties": [], "rollout_percentage": 0},
            ]
        },
    }


def _change(
    op: str, value: Any, at: int = NOW, id: int = 1, **extra: Any
) -> scheduled.ScheduledChange:
    return scheduled.ScheduledChange(
        id=id,
        project_id=1,
        flag_id=5,
        operation=scheduled.Operation(op),
        payload={"operation": op, "value": value, **extra},
        run_at_ms=at,
        created_by=2,
        created_at_ms=0,
    )


@pytest.mark.parametrize(
    ("payload", "run_at", "field"),
    [
        ([], NOW + 1, "payload"),
        ({"operation": "explode", "value": 1}, NOW + 1, "payload"),
        ({"operation": "update_status", "value": "yes"}, NOW + 1, "payload"),
        ({"operation": "update_status", "value": True}, NOW, "scheduled_at"),
        ({"operation": "update_status", "value": True}, "soon", "scheduled_at"),
        ({"operation": "add_release_condition", "value": {"groups": {}}}, NOW + 1, "payload"),
        ({"operation": "update_variants", "value": {}}, NOW + 1, "payload"),
        ({"operation": "update_rollout", "value": 101}, NOW + 1, "payload"),
        ({"operation": "update_rollout", "value": 5, "group": -1}, NOW + 1, "payload"),
    ],
)
def test_schedules_refused_with_the_field(payload: Any, run_at: Any, field: str) -> None:
    with pytest.raises(scheduled.ScheduleError) as info:
        scheduled.check_schedule(payload, run_at, NOW)
    assert info.value.field == field


def test_due_changes_become_update_bodies() -> None:
    changes = [
        _change("update_rollout", 50, NOW - 5, id=2, group=1),
        _change("update_status", False, NOW - 10, id=3),
        _change("update_status", True, NOW + 10, id=4),
    ]
    assert scheduled.check_schedule(
        {"operation": "update_status", "value": False}, NOW + 1, NOW
    ) is (scheduled.Operation.UPDATE_STATUS)
    ready = scheduled.due(changes, NOW)
    assert [c.id for c in ready] == [3, 2]
    flag = _flag()
    assert scheduled.update_body(ready[0], flag) == {"active": False, "version": 3}
    body = scheduled.update_body(ready[1], flag)
    assert [g["rollout_percentage"] for g in body["filters"]["groups"]] == [10, 50]
    assert body["version"] == 3
    assert flag["filters"]["groups"][1]["rollout_percentage"] == 0  # the flag is not mutated
    every = scheduled.update_body(_change("update_rollout", 100), flag)
    assert [g["rollout_percentage"] for g in every["filters"]["groups"]] == [100, 100]
    with pytest.raises(scheduled.ScheduleError):
        scheduled.update_body(_change("update_rollout", 1, group=2), flag)
    assert scheduled.trigger_for(ready[0]).job_type == "scheduled_change"


def test_release_conditions_and_variants_scheduled_as_posthog_does() -> None:
    flag = _flag()
    added = scheduled.update_body(
        _change(
            "add_release_condition",
            {"groups": [{"properties": [], "rollout_percentage": 20}], "payloads": {"true": "1"}},
        ),
        flag,
    )
    assert len(added["filters"]["groups"]) == 3 and added["filters"]["payloads"] == {"true": "1"}
    variants = [{"key": "a", "rollout_percentage": 50}, {"key": "b", "rollout_percentage": 50}]
    changed = scheduled.update_body(_change("update_variants", {"variants": variants}), flag)
    assert changed["filters"]["multivariate"] == {"variants": variants}
    assert len(flag["filters"]["groups"]) == 2 and "multivariate" not in flag["filters"]


def _who(user_id: int, role: Role = Role.EDITOR) -> Principal:
    return Principal(project_id=1, role=role, method=AuthMethod.SESSION, user_id=user_id)


def _request(base_version: int | None = 3) -> approvals.ChangeRequest:
    return approvals.ChangeRequest(
        id=9,
        project_id=1,
        flag_id=5,
        body={"active": False, "version": 3},
        base_version=base_version,
        author_user_id=1,
        status=approvals.RequestStatus.PENDING,
        created_at_ms=0,
    )


def test_a_second_person_approves_and_the_change_applies() -> None:
    own = approvals.approve(_request(), _who(1), 3, NOW)
    assert not own.apply and "someone other" in (own.problem or "")
    viewer = approvals.approve(_request(), _who(2, Role.VIEWER), 3, NOW)
    assert not viewer.apply and viewer.problem
    ok = approvals.approve(_request(), _who(2), 3, NOW)
    assert ok.apply and ok.problem is None
    assert ok.request.status is approvals.RequestStatus.APPLIED and ok.request.decided_by == 2
    assert ok.trigger is not None and ok.trigger.payload["author"] == 1
    again = approvals.approve(ok.request, _who(3), 3, NOW)
    assert not again.apply and "already applied" in (again.problem or "")


def test_a_request_made_stale_by_another_change_is_not_applied() -> None:
    stale = approvals.approve(_request(), _who(2), 4, NOW)
    assert not stale.apply and stale.request.status is approvals.RequestStatus.STALE


def test_rejecting_or_withdrawing() -> None:
    rejected = approvals.reject(_request(), _who(2), "not now", NOW)
    assert rejected.request.status is approvals.RequestStatus.REJECTED
    assert rejected.request.comment == "not now"
    withdrawn = approvals.reject(_request(), _who(1, Role.VIEWER), "", NOW)
    assert withdrawn.problem is None
    refused = approvals.reject(_request(), _who(7, Role.VIEWER), "", NOW)
    assert refused.problem is not None and refused.request.status is approvals.RequestStatus.PENDING


def test_a_user_less_key_is_its_own_author_and_schedules_go_stale_when_due() -> None:
    key_made = msgspec.structs.replace(_request(), author_user_id=None, author_key_id=4)
    same_key = Principal(1, Role.ADMIN, AuthMethod.PERSONAL_KEY, user_id=None, key_id=4)
    other_key = Principal(1, Role.ADMIN, AuthMethod.PERSONAL_KEY, user_id=None, key_id=5)
    assert "someone other" in (approvals.approve(key_made, same_key, 3, NOW).problem or "")
    assert approvals.approve(key_made, other_key, 3, NOW).apply
    assert approvals.approve(key_made, _who(2), 3, NOW).apply
    assert approvals.is_author(key_made, same_key) and not approvals.is_author(key_made, _who(2))
    assert approvals.reject(key_made, same_key, "", NOW).problem is None

    schedule = msgspec.structs.replace(
        _request(None),
        kind=approvals.RequestKind.SCHEDULE,
        body={"operation": "update_status", "payload": {}, "run_at_ms": NOW + 10},
    )
    # the flag's version does not matter to a schedule, only that it exists and is not due
    assert approvals.approve(schedule, _who(2), 8, NOW).apply
    late = approvals.approve(schedule, _who(2), 8, NOW + 10)
    assert late.request.status is approvals.RequestStatus.STALE and "passed" in (late.problem or "")
    gone = approvals.approve(schedule, _who(2), None, NOW)
    assert gone.request.status is approvals.RequestStatus.STALE
