"""The activity log's pure part: diffs in PostHog's shape, readable lines, rollback, webhooks."""

from __future__ import annotations

import msgspec
import pytest

from flagstaff.activity import api, readable, rollback, webhooks
from flagstaff.activity.diff import changes_between, record_change
from flagstaff.activity.records import (
    Activity,
    Actor,
    ChangeAction,
    Scope,
    StoredActivity,
)
from tests.webhook_receiver import verify_signature

ALICE = Actor(user_id=4, email="alice@example.com", first_name="Alice")


def _flag(version: int, **changes: object) -> dict[str, object]:
    flag: dict[str, object] = {
        "id": 12,
        "key": "new-checkout",
        "name": "New checkout",
        "active": True,
        "deleted": False,
        "filters": {"groups": [{"properties": [], "rollout_percentage": 50}]},
        "ensure_experience_continuity": False,
        "evaluation_runtime": "all",
        "evaluation_contexts": [],
        "bucketing_identifier": "distinct_id",
        "tags": ["checkout"],
        "version": version,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": f"2026-01-0{version}T00:00:00Z",
    }
    flag.update(changes)
    return flag


def _iso(ms: int) -> str:
    return f"iso({ms})"


def test_changes_list_fields_in_posthogs_shape_without_bookkeeping_fields() -> None:
    before = _flag(1)
    after = _flag(2, active=False, name=None, tags=["checkout", "q3"], rollout_percentage=5)
    changes = changes_between(Scope.FEATURE_FLAG, before, after)
    assert [(c.field, c.action) for c in changes] == [
        ("active", ChangeAction.CHANGED),
        ("name", ChangeAction.DELETED),
        ("rollout_percentage", ChangeAction.CREATED),
        ("tags", ChangeAction.CHANGED),
    ]
    first = msgspec.to_builtins(changes[0])
    assert first == {
        "type": "FeatureFlag",
        "action": "changed",
        "field": "active",
        "before": True,
        "after": False,
    }
    assert changes_between(Scope.FEATURE_FLAG, _flag(1, active=1), _flag(1))[0].field == "active"


def test_record_change_picks_the_activity_and_skips_empty_updates() -> None:
    created = record_change(
        project_id=1,
        scope=Scope.FEATURE_FLAG,
        item_id=12,
        actor=ALICE,
        before=None,
        after=_flag(1),
        now_ms=5,
    )
    assert created is not None and created.activity is Activity.CREATED
    assert created.item_id == "12" and created.detail.name == "new-checkout"
    assert {c.action for c in created.detail.changes or []} == {ChangeAction.CREATED}
    deleted = record_change(
        project_id=1,
        scope=Scope.FEATURE_FLAG,
        item_id=12,
        actor=ALICE,
        before=_flag(1),
        after=_flag(2, deleted=True),
        now_ms=6,
    )
    assert deleted is not None and deleted.activity is Activity.DELETED
    # Only the version and updated_at moved: nothing a person would call a change.
    assert (
        record_change(
            project_id=1,
            scope=Scope.FEATURE_FLAG,
            item_id=12,
            actor=ALICE,
            before=_flag(1),
            after=_flag(2),
            now_ms=7,
        )
        is None
    )


def test_activity_json_matches_posthogs_serializer() -> None:
    record = record_change(
        project_id=1,
        scope=Scope.FEATURE_FLAG,
        item_id=12,
        actor=ALICE,
        before=_flag(1),
        after=_flag(2, active=False),
        now_ms=1_700,
    )
    assert record is not None
    body = api.activity_json(StoredActivity(id=9, uuid="0191-uuid", record=record), _iso)
    assert body["id"] == "0191-uuid"
    assert body["scope"] == "FeatureFlag" and body["activity"] == "updated"
    assert body["item_id"] == "12" and body["created_at"] == "iso(1700)"
    assert body["user"]["email"] == "alice@example.com" and body["is_system"] is False
    assert body["detail"]["name"] == "new-checkout"
    assert body["detail"]["changes"] == [
        {
            "type": "FeatureFlag",
            "action": "changed",
            "field": "active",
            "before": True,
            "after": False,
        }
    ]
    assert body["detail"]["trigger"] is None
    msgspec.json.encode(body)  # serialisable as is
    stored = StoredActivity(id=9, uuid="0191-uuid", record=record)
    cursor_page = api.activity_page([stored], _iso, "next-url", None)
    assert cursor_page == {"results": [body], "next": "next-url", "previous": None}
    assert api.activity_page([stored], _iso, None, None, total_count=1)["total_count"] == 1


def test_readable_diff_reports_each_nested_leaf() -> None:
    before = _flag(1)
    after = _flag(
        2,
        filters={
            "groups": [
                {"properties": [], "rollout_percentage": 100},
                {"properties": [{"key": "plan", "value": ["pro"], "operator": "exact"}]},
            ],
            "payloads": {"true": '{"color": "<b>"}'},
        },
        tags=["checkout", "q3"],
    )
    lines = readable.readable_diff(before, after)
    by_path = {line.path: line for line in lines}
    assert by_path["filters.groups[0].rollout_percentage"].before == "50"
    assert by_path["filters.groups[0].rollout_percentage"].after == "100"
    assert by_path["filters.groups[0].rollout_percentage"].label == (
        "Release conditions > Condition sets > #1 > Rollout %"
    )
    assert by_path["filters.groups[1]"].kind is readable.LineKind.ADDED
    assert by_path["filters.payloads"].kind is readable.LineKind.ADDED
    assert by_path["tags"].after == '["checkout","q3"]'  # tags are one value, not per position
    assert by_path["version"].kind is readable.LineKind.CHANGED
    assert "key" not in by_path
    record = record_change(
        project_id=1,
        scope=Scope.FEATURE_FLAG,
        item_id=12,
        actor=ALICE,
        before=before,
        after=after,
        now_ms=1,
    )
    assert record is not None
    paths = [line.path for line in readable.readable_changes(record.detail.changes)]
    assert "filters.groups[0].rollout_percentage" in paths and "version" not in paths


def test_rollback_restores_an_earlier_version_against_the_current_one() -> None:
    history = [
        rollback.FlagVersion(1, _flag(1), 1),
        rollback.FlagVersion(2, _flag(2, active=False), 2),
        rollback.FlagVersion(3, _flag(3, active=False, tags=[]), 3),
    ]
    current = _flag(3, active=False, tags=[])
    plan = rollback.plan_rollback(12, history, current, 1)
    assert plan.base_version == 3 and plan.target_version == 1
    assert plan.body["active"] is True and plan.body["tags"] == ["checkout"]
    assert plan.body["version"] == 3
    assert "id" not in plan.body and "created_at" not in plan.body
    assert {c.field for c in plan.changes} == {"active", "tags"}
    assert plan.trigger.payload == {"from_version": 3, "to_version": 1}


@pytest.mark.parametrize(
    ("target", "message"),
    [(3, "current version"), (7, "no version 7"), (2, "identical")],
)
def test_rollback_refusals(target: int, message: str) -> None:
    history = [rollback.FlagVersion(1, _flag(1), 1), rollback.FlagVersion(2, _flag(2), 2)]
    with pytest.raises(rollback.RollbackError, match=message):
        rollback.plan_rollback(12, history, _flag(3), target)


def _stored(scope: Scope = Scope.FEATURE_FLAG) -> StoredActivity:
    record = record_change(
        project_id=1,
        scope=scope,
        item_id=12,
        actor=ALICE,
        before=_flag(1),
        after=_flag(2, active=False),
        now_ms=1_000,
    )
    assert record is not None
    return StoredActivity(id=5, uuid="u-5", record=record)


def test_webhook_payload_and_signature_round_trip() -> None:
    stored = _stored()
    body = webhooks.payload_bytes(stored, _iso)
    decoded = msgspec.json.decode(body)
    assert decoded["event"] == "feature_flag.updated"
    assert decoded["activity"]["detail"]["changes"][0]["field"] == "active"
    assert webhooks.event_name(_stored(Scope.PERSONAL_API_KEY)) == "personal_api_key.updated"
    header = webhooks.signature_header("whsec_x", 1_000_000, body)
    assert header.startswith("t=1000000,v1=")
    assert verify_signature("whsec_x", header, body, now_s=1_000_100)
    assert not verify_signature("whsec_y", header, body, now_s=1_000_100)
    assert not verify_signature("whsec_x", header, body + b" ", now_s=1_000_100)
    assert not verify_signature("whsec_x", header, body, now_s=1_000_000 + 301)
    assert not verify_signature("whsec_x", "v1=abc", body, now_s=1_000_000)
    headers = webhooks.request_headers("whsec_x", 1_000_000, body, "feature_flag.updated", 8)
    assert headers[webhooks.SIGNATURE_HEADER] == header
    assert webhooks.scope_matches([], stored) and webhooks.scope_matches(["FeatureFlag"], stored)
    assert not webhooks.scope_matches(["Cohort"], stored)


def test_webhook_urls_checked() -> None:
    assert webhooks.webhook_url_problem("https://hooks.example.com/x") is None
    assert webhooks.webhook_url_problem("ftp://x") is not None
    assert webhooks.webhook_url_problem("https://user:pw@x.example") is not None
    assert webhooks.webhook_url_problem("https:///path") is not None
    assert webhooks.new_webhook_secret().startswith("whsec_")


def test_retry_schedule_until_success_or_give_up() -> None:
    delivery = webhooks.Delivery(
        id=1,
        webhook_id=2,
        activity_id=3,
        status=webhooks.DeliveryStatus.PENDING,
        attempts=0,
        next_attempt_ms=0,
        created_at_ms=0,
    )
    now = 0
    seen_delays = []
    while delivery.status is webhooks.DeliveryStatus.PENDING:
        delivery = webhooks.after_attempt(delivery, 503, "unavailable", now)
        if delivery.next_attempt_ms is not None:
            seen_delays.append((delivery.next_attempt_ms - now) // 1000)
            now = delivery.next_attempt_ms
    assert tuple(seen_delays) == webhooks.RETRY_DELAYS_S
    assert delivery.status is webhooks.DeliveryStatus.FAILED
    assert delivery.attempts == len(webhooks.RETRY_DELAYS_S) + 1
    assert delivery.last_status_code == 503

    fresh = msgspec.structs.replace(delivery, status=webhooks.DeliveryStatus.PENDING, attempts=0)
    assert webhooks.after_attempt(fresh, 204, "", 5).status is webhooks.DeliveryStatus.SUCCEEDED
    assert webhooks.after_attempt(fresh, 404, "", 5).status is webhooks.DeliveryStatus.FAILED
    retried = webhooks.after_attempt(fresh, 429, "", 5)
    assert retried.status is webhooks.DeliveryStatus.PENDING and retried.next_attempt_ms == 10_005
    assert (
        webhooks.after_attempt(fresh, None, "timeout", 5).status is webhooks.DeliveryStatus.PENDING
    )
    assert webhooks.delivery_json(retried, _iso)["next_attempt_at"] == "iso(10005)"


def test_retry_schedule_can_be_configured() -> None:
    assert webhooks.parse_retry_delays("0.5, 2,") == (0.5, 2.0)
    assert webhooks.parse_retry_delays("") == ()
    for bad in ("x", "-1", ",".join(["1"] * 21), "999999999"):
        with pytest.raises(ValueError):
            webhooks.parse_retry_delays(bad)
    delivery = webhooks.Delivery(1, 2, 3, webhooks.DeliveryStatus.PENDING, 0, 0, 0)
    first = webhooks.after_attempt(delivery, None, "refused", 1_000, (0.25,), duration_ms=3)
    assert first.next_attempt_ms == 1_250 and first.last_duration_ms == 3
    assert first.last_attempt_ms == 1_000
    assert webhooks.after_attempt(first, 500, "", 2_000, (0.25,)).status is (
        webhooks.DeliveryStatus.FAILED
    )
    assert webhooks.after_attempt(delivery, 500, "", 0, ()).status is webhooks.DeliveryStatus.FAILED
    assert webhooks.webhook_url_problem("https://x.example:99999/") is not None
    assert webhooks.webhook_url_problem("https://x.example/a b") is not None
    assert webhooks.webhook_url_problem("https://x.example/" + "a" * 2000) is not None
