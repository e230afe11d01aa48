"""The read use cases of persons, groups, group types, events, warnings, the activity log,
scheduled changes, flag usage and property value suggestions, without a server: they return
records (``application/people.py``, ``activity.py``, ``flags.py``, ``flag_usage.py``,
``property_values.py``), and the ``*_json`` functions render them in the API's shapes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flagstaff.accounts.records import Role
from flagstaff.accounts.roles import AuthMethod, Principal
from flagstaff.activity.approvals import ApprovalPolicy
from flagstaff.activity.records import Scope
from flagstaff.activity.scheduled import Operation, ScheduledChange
from flagstaff.application import activity, flag_usage, people, property_values
from flagstaff.application import flags as flag_rules
from flagstaff.application.approvals import Held
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.common import clock
from flagstaff.common.units import DAY_MS
from flagstaff.flags.records import FeatureFlag
from flagstaff.store.flag_usage import ValueChecks
from flagstaff.store.property_values import ValueCount
from flagstaff.store.records import EventQuery, Group, Page, Person, StoredEvent, Warning
from tests.stored_flags import stored_flag

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z
TODAY = NOW // DAY_MS


def _caller(store: Any, project_id: int = 1) -> Caller[Any]:
    principal = Principal(project_id, Role.ADMIN, AuthMethod.PERSONAL_KEY, user_id=7)
    return Caller(store=store, accounts=store, project_id=project_id, principal=principal)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _event(seq: int) -> StoredEvent:
    return StoredEvent(
        seq, f"u{seq}", "$pageview", "d1", {"n": seq}, NOW - seq, NOW, False, None, None
    )


class People:
    """A PeopleStore of one person, one group, two group types, three events, two warnings."""

    def __init__(self) -> None:
        self.person = Person(1, "p-uuid", {"plan": "pro"}, True, NOW, ["d1"])
        self.group = Group(0, "company", "acme", {"seats": 3}, NOW)
        self.types = {1: "team", 0: "company"}
        self.events = [_event(1), _event(2), _event(3)]
        self.warnings = [Warning(2, "cannot_merge", {"a": 1}, NOW), Warning(1, "big", {}, NOW)]

    async def get_person(self, project_id: int, distinct_id: str) -> Person | None:
        return self.person if distinct_id == "d1" else None

    async def get_group(self, project_id: int, index: int, key: str) -> Group | None:
        return self.group if (index, key) == (0, "acme") else None

    async def list_group_types(self, project_id: int) -> dict[int, str]:
        return dict(self.types)

    async def create_group_type(self, project_id: int, index: int, name: str) -> bool:
        new = index not in self.types
        self.types[index] = name
        return new

    async def list_events(self, project_id: int, query: EventQuery) -> list[StoredEvent]:
        return self.events[: query.limit]

    async def list_warnings(self, project_id: int, limit: int, offset: int) -> Page:
        return Page(len(self.warnings), self.warnings[offset : offset + limit])

    async def list_groups(
        self, project_id: int, group_type_index: int, search: str, limit: int, offset: int
    ) -> list[Group]:
        return [self.group][offset : offset + limit]


def test_persons_and_groups_come_back_as_records() -> None:
    caller = _caller(People())
    person = _run(people.find_person(caller, "d1"))
    assert isinstance(person, Person) and person.uuid == "p-uuid"
    assert _run(people.find_person(caller, "nobody")) is None
    assert list(people.person_json(person)) == [
        "id", "uuid", "distinct_ids", "properties", "is_identified", "created_at",
    ]  # fmt: skip
    group = _run(people.find_group(caller, 0, "acme"))
    assert isinstance(group, Group) and group.group_key == "acme"
    with pytest.raises(ApiError) as missing:
        _run(people.find_group(caller, 0, "other"))
    assert missing.value.status == 404
    assert people.group_json(group)["group_properties"] == {"seats": 3}
    assert _run(people.list_groups(caller, 0, "", 1, 0)) == people.GroupPage([group], False)
    assert _run(people.list_groups(caller, 0, "", 0, 0)) == people.GroupPage([], True)


def test_group_types_are_records_by_index_and_a_mapping_tells_whether_it_is_new() -> None:
    store = People()
    caller = _caller(store)
    assert _run(people.list_group_types(caller)) == [
        people.GroupType(0, "company"),
        people.GroupType(1, "team"),
    ]
    again = _run(people.create_group_type(caller, people.group_type_input({"group_type": "team"})))
    assert again == people.MappedGroupType(people.GroupType(1, "team"), created=False)
    new = _run(people.create_group_type(caller, people.group_type_input({"group_type": "org"})))
    assert new == people.MappedGroupType(people.GroupType(2, "org"), created=True)
    assert people.group_type_json(new.group_type) == {
        "group_type": "org",
        "group_type_index": 2,
        "name_singular": None,
        "name_plural": None,
        "detail_dashboard": None,
        "default_columns": None,
        "created_at": None,
    }


def test_an_events_page_holds_the_events_and_the_next_cursor() -> None:
    store = People()
    page = _run(people.events_page(_caller(store), EventQuery(limit=2)))
    assert page.events == store.events[:2]
    assert page.cursor == people.event_cursor(store.events[1])
    last = _run(people.events_page(_caller(store), EventQuery(limit=3)))
    assert (last.events, last.cursor) == (store.events, None)
    assert people.event_json(last.events[0])["uuid"] == "u1"


def test_warnings_are_a_count_and_records() -> None:
    store = People()
    page = _run(people.list_warnings(_caller(store), 1, 1))
    assert page == people.WarningPage(2, [store.warnings[1]])
    assert people.warning_json(page.warnings[0])["type"] == "big"


class Row:
    """An activity record stand-in (the use cases only pass records on, and read the id)."""

    def __init__(self, id: int) -> None:
        self.id = id


class Activity:
    def __init__(self) -> None:
        self.rows: list[Any] = [Row(100 - i) for i in range(5)]
        self.asked: list[dict[str, Any]] = []

    async def list_activity(self, project_id: int, **query: Any) -> list[Any]:
        self.asked.append(query)
        offset = query.get("offset", 0)
        return self.rows[offset : offset + query["limit"]]

    async def count_activity(self, project_id: int, scope: Scope, item_id: str | None) -> int:
        return len(self.rows)


def test_activity_pages_are_records_with_their_total_or_cursor() -> None:
    store = Activity()
    caller = _caller(store)
    page = _run(activity.flag_activity(caller, stored_flag({"key": "f"}, 3), 2, 2))
    assert page == activity.FlagActivity(store.rows[2:4], 5)
    assert store.asked[-1]["item_id"] == "3" and store.asked[-1]["offset"] == 2
    store.rows = store.rows[:3]
    log = _run(
        activity.activity_log(
            caller, scope=None, item_id=None, user_id=None, before_id=None, limit=2
        )
    )
    assert log == activity.ActivityLog(store.rows[:2], store.rows[1].id)
    whole = _run(
        activity.activity_log(
            caller, scope=None, item_id=None, user_id=None, before_id=None, limit=3
        )
    )
    assert whole == activity.ActivityLog(store.rows, None)


class Schedules:
    """A ScheduleStore of one flag, with the approval policy on or off."""

    def __init__(self, enabled: bool = False) -> None:
        self.flag = stored_flag({"key": "f"}, 4)
        self.policy = ApprovalPolicy(enabled=enabled)
        self.changes: list[ScheduledChange] = []

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None:
        return self.flag if flag_id == 4 else None

    async def approval_policy(self, project_id: int) -> ApprovalPolicy:
        return self.policy

    async def create_change_request(self, request: Any, flag_key: str, source: Any) -> Any:
        return request

    async def create_scheduled_change(
        self, project_id: int, flag_id: int, operation: Operation, payload: dict[str, Any],
        run_at_ms: int, created_by: int | None, now_ms: int,
    ) -> ScheduledChange:  # fmt: skip
        change = ScheduledChange(
            len(self.changes) + 1, project_id, flag_id, operation, payload, run_at_ms,
            created_by, now_ms,
        )  # fmt: skip
        self.changes.append(change)
        return change

    async def list_scheduled_changes(
        self, project_id: int, flag_id: int | None
    ) -> list[ScheduledChange]:
        return [c for c in self.changes if flag_id is None or c.flag_id == flag_id]


SCHEDULE = {
    "record_id": "4",
    "payload": {"operation": "update_status", "value": False},
    "scheduled_at": "2099-01-01T00:00:00Z",
}


def test_a_scheduled_change_is_a_record_and_listed_as_one() -> None:
    store = Schedules()
    caller = _caller(store)
    change = _run(
        flag_rules.create_scheduled_change(caller, flag_rules.scheduled_change_input(SCHEDULE))
    )
    assert isinstance(change, ScheduledChange)
    assert (change.flag_id, change.operation, change.created_by) == (
        4,
        Operation.UPDATE_STATUS,
        7,
    )
    assert _run(flag_rules.list_scheduled_changes(caller, 4)) == [change]
    assert _run(flag_rules.list_scheduled_changes(caller, 5)) == []
    shown = flag_rules.scheduled_json(change)
    assert (shown["record_id"], shown["scheduled_at"]) == ("4", "2099-01-01T00:00:00.000Z")


def test_a_scheduled_change_under_the_policy_is_held() -> None:
    store = Schedules(enabled=True)
    held = _run(
        flag_rules.create_scheduled_change(
            _caller(store), flag_rules.scheduled_change_input(SCHEDULE)
        )
    )
    assert isinstance(held, Held)
    assert store.changes == []


class Usage:
    async def flag_value_checks(
        self, project_id: int, flag_key: str, since_day: int
    ) -> list[ValueChecks]:
        return [
            ValueChecks(TODAY, "test", 3, NOW - 5),
            ValueChecks(TODAY - 1, "control", 2, NOW - DAY_MS),
        ]

    async def flag_last_seen(self, project_id: int, keys: list[str]) -> dict[str, int]:
        return {keys[0]: NOW - 5}


def test_flag_usage_is_a_record_the_api_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock, "now_ms", lambda: NOW)
    flag = stored_flag(
        {"key": "exp", "filters": {"multivariate": {"variants": [{"key": "control"}]}}}, 1
    )
    usage = _run(flag_usage.flag_usage(_caller(Usage()), flag, 2))
    assert isinstance(usage, flag_usage.FlagUsage)
    assert (usage.flag_key, usage.days, usage.last_seen_ms) == ("exp", 2, NOW - 5)
    assert [s.value for s in usage.checks.series] == ["control", "test"]
    assert usage.checks.total == 5
    shown = flag_usage.usage_json(usage)
    assert list(shown) == [
        "flag_key", "days", "values", "total", "checks_per_day", "last_seen",
    ]  # fmt: skip
    assert shown["values"] == {"control": 2, "test": 3}
    assert shown["checks_per_day"] == 2.5
    assert [d["checks"] for d in shown["days"]] == [2, 3]
    with pytest.raises(ApiError) as refused:
        _run(flag_usage.flag_usage(_caller(Usage()), flag, 0))
    assert refused.value.attr == "days"


class Values:
    async def property_values(
        self, project_id: int, key: str, group_type_index: int | None
    ) -> list[ValueCount]:
        return [ValueCount("Pro", 5), ValueCount("free", 3), ValueCount("pro-trial", 1)]


def test_suggestions_are_value_counts() -> None:
    caller = _caller(Values(), project_id=424_242)  # a project of its own in the sample cache
    found = _run(property_values.suggestions(caller, "plan", None, "PRO", 10))
    assert found == [ValueCount("Pro", 5), ValueCount("pro-trial", 1)]
    assert _run(property_values.suggestions(caller, "plan", None, "", 1)) == [ValueCount("Pro", 5)]
    assert property_values.suggestion_json(found[0]) == {"name": "Pro", "count": 5}
