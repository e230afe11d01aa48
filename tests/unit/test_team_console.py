"""The console's team pages: pure view-models (members, cohort sizes and the cohort editor,
warnings, usage, the events chart), dynamic cohort counting, and the rendered pages (labels,
escaping, what viewers are offered) over in-memory fakes."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from flagstaff.accounts.records import Membership, Role, User
from flagstaff.application.accounts import Member
from flagstaff.console import charts, team_views
from flagstaff.console.cohort_counts import CohortCounter
from flagstaff.console.routes import ConsoleSettings, console_routes
from flagstaff.console.team_pages import team_routes
from flagstaff.console.views import PersonFlag
from flagstaff.store.base import Group, PersonRow, Usage, Warning
from tests.unit.console_fakes import MemoryAccounts, MemoryData, MemoryTeamData, cohort
from tests.unit.test_console import EVIL, FAST, NOW, PASSWORD, _check_accessible, _Clock, _login

MINUTE = 60_000


def _person(props: dict[str, Any], statics: frozenset[int] = frozenset()) -> PersonRow:
    return PersonRow(0, props, statics)


def _rule(key: str, value: Any, operator: str = "exact") -> dict[str, Any]:
    return {"key": key, "type": "person", "operator": operator, "value": value}


# view-models -------------------------------------------------------------------------------


def test_member_rows_sorted_with_you_and_admin_count() -> None:
    ada = User(1, "ada@example.com", "h", 0, last_login_ms=NOW)
    bob = User(2, "bob@example.com", "h", 0)
    rows = team_views.member_rows(
        [
            Member(bob, Membership(2, 1, Role.ADMIN, 5)),
            Member(ada, Membership(1, 1, Role.VIEWER, 3)),
        ],
        1,
    )
    assert [(r.email, r.role, r.is_you) for r in rows] == [
        ("ada@example.com", "viewer", True),
        ("bob@example.com", "admin", False),
    ]
    assert team_views.admins(rows) == 1 and rows[0].last_login_ms == NOW


def test_cohort_sizes_static_dynamic_partial_and_failed() -> None:
    static = cohort(1, name="b", is_static=True, count=1234)
    dynamic = cohort(2, name="A")
    broken = cohort(3, name="c")
    gone = cohort(4, name="d", deleted=True)
    complete = team_views.DynamicCounts({2: 5, 3: 0}, frozenset({3}), 10, True)
    rows = team_views.cohort_rows([static, dynamic, broken, gone], complete)
    assert [(r.id, r.count) for r in rows] == [(2, "5"), (1, "1,234"), (3, "cannot be evaluated")]
    partial = team_views.DynamicCounts({2: 1500}, frozenset(), 20_000, False)
    assert team_views.count_text(dynamic, partial) == (
        "at least 1,500 (first 20,000 persons checked)"
    )
    assert team_views.count_text(dynamic, team_views.NO_COUNTS) == "not counted"


def test_cohort_editor_model_reads_condition_sets_or_falls_back_to_json() -> None:
    new = team_views.cohort_editor_model(None)
    assert new.id is None and new.conditions == [[]] and new.editable
    or_of_ands = cohort(
        5,
        name="Pros",
        version=2,
        filters={
            "properties": {
                "type": "OR",
                "values": [
                    {"type": "AND", "values": [_rule("plan", "pro"), _rule("age", 30, "gt")]},
                    {"type": "AND", "values": [{"key": "id", "type": "cohort", "value": 9}]},
                ],
            }
        },
    )
    model = team_views.cohort_editor_model(or_of_ands)
    assert model.editable and [len(s) for s in model.conditions] == [2, 1]
    assert model.conditions[0][1].operator == "gt" and model.conditions[0][1].value == "30"
    assert model.conditions[1][0].type == "cohort" and model.conditions[1][0].value == "9"
    flat_and = cohort(6, filters={"properties": {"type": "AND", "values": [_rule("a", "b")]}})
    assert [len(s) for s in team_views.cohort_editor_model(flat_and).conditions] == [1]
    flat_or = cohort(7, filters={"properties": {"type": "OR", "values": [
        _rule("a", "b"), _rule("c", "d")]}})  # fmt: skip
    assert [len(s) for s in team_views.cohort_editor_model(flat_or).conditions] == [1, 1]
    negated = cohort(8, filters={"properties": {"type": "AND", "values": [
        {**_rule("a", "b"), "negation": True}]}})  # fmt: skip
    deep = cohort(9, filters={"properties": {"type": "AND", "values": [
        {"type": "OR", "values": [_rule("a", "b")]}, _rule("c", "d")]}})  # fmt: skip
    for shown in (negated, deep):
        model = team_views.cohort_editor_model(shown)
        assert not model.editable and '"values"' in model.filters_json


def test_warning_rows_labels_and_summary() -> None:
    warnings = [
        Warning(3, "missing_event_name", {"detail": "no name", "distinct_id": "u1"}, NOW),
        Warning(2, "cannot_merge_already_identified", {"sourcePersonDistinctId": "x"}, NOW),
        Warning(1, "missing_event_name", {"detail": "empty", "event": EVIL}, NOW),
        Warning(0, "some_new_kind", {}, NOW),
    ]
    rows = team_views.warning_rows(warnings)
    assert rows[0].label == "Event without a name" and rows[0].distinct_id == "u1"
    assert rows[1].detail == "sourcePersonDistinctId: x"
    assert rows[2].event == EVIL and rows[3].label == "Some new kind"
    summary = team_views.warning_summary(warnings)
    assert summary[0] == ("missing_event_name", "Event without a name", 2)


def test_usage_figures_say_or_more_at_the_cap() -> None:
    figures = team_views.usage_figures(Usage(100, 99, 3, 1, 100), 600, 0)
    shown = {f.label: f.value for f in figures}
    assert shown["Events stored"] == "100 or more" and shown["Persons"] == "99"
    assert shown["Flag request quota"] == "600 requests per minute"
    assert shown["Event quota"] == "no quota"


def test_events_chart_geometry_and_words() -> None:
    assert [charts.nice_ceiling(n) for n in (0, 1, 3, 7, 10, 11, 4500)] == [
        1,
        1,
        5,
        10,
        10,
        20,
        5000,
    ]
    start = charts.chart_start(NOW + 30_000)
    assert start % MINUTE == 0 and NOW + 30_000 - start < 60 * MINUTE
    counts = [0] * 58 + [5, 10]
    chart = charts.events_per_minute_chart(counts, start, 10)
    assert len(chart.bars) == 60 and len(chart.rows) == 60
    assert chart.bars[0].height == 0 and chart.bars[-1].height == 2 * chart.bars[-2].height
    assert chart.bars[-1].y == chart.top  # the peak reaches the top of the plot
    assert all(b.x >= chart.left and b.x + b.width <= chart.right for b in chart.bars)
    assert chart.bars[-1].label.endswith("UTC: 10 or more events")
    assert "15 events in the last 60 minutes" in chart.description
    assert [t.label for t in chart.y_ticks] == ["0", "5", "10"]
    assert len(chart.x_ticks) == 6
    empty = charts.events_per_minute_chart([0] * 60, start, 10)
    assert empty.description == "No events in the last 60 minutes."


def test_cohort_counter_matches_properties_statics_and_nested_cohorts() -> None:
    cohorts = [
        {"id": 1, "is_static": True},
        {"id": 2, "filters": {"properties": {"type": "AND", "values": [_rule("plan", "pro")]}}},
        {
            "id": 3,
            "filters": {
                "properties": {
                    "type": "OR",
                    "values": [
                        {"key": "id", "type": "cohort", "value": 1},
                        {"key": "id", "type": "cohort", "value": 2},
                    ],
                }
            },
        },
        {
            "id": 4,
            "filters": {
                "properties": {
                    "type": "AND",
                    "values": [{"key": "id", "type": "cohort", "value": 99}],
                }
            },
        },
    ]
    counter = CohortCounter(cohorts)
    try:
        assert counter.uses_static and not counter.empty
        counter.add(
            [
                _person({"plan": "pro"}),
                _person({"plan": "free"}, frozenset({1})),
                _person({"plan": "free"}),
            ]
        )
        result = counter.result(complete=True)
    finally:
        counter.close()
    assert result.counts[2] == 1 and result.counts[3] == 2
    assert result.failed == frozenset({4}) and result.scanned == 3
    assert CohortCounter([{"id": 1, "is_static": True}]).empty
    only = CohortCounter(cohorts, only=[3])  # a reference resolves among all the cohorts
    try:
        only.add([_person({"plan": "pro"})])
        assert only.result(True).counts == {3: 1}
    finally:
        only.close()


# pages -------------------------------------------------------------------------------------


def _client(role: Role = Role.ADMIN) -> tuple[TestClient, MemoryTeamData, MemoryData]:
    accounts = MemoryAccounts()
    data = MemoryData()
    team = MemoryTeamData()

    async def setup() -> None:
        user = await accounts.create_user("ada@example.com", FAST.hash(PASSWORD), 0)
        await accounts.set_membership(user.id, 1, role, 0)
        other = await accounts.create_user("bob+<b>@example.com", FAST.hash(PASSWORD), 0)
        await accounts.set_membership(other.id, 1, Role.EDITOR, 0)

    asyncio.run(setup())
    routes = console_routes(
        accounts, data, ConsoleSettings(), _Clock(), extra=[lambda pages: team_routes(pages, team)]
    )
    client = TestClient(Starlette(routes=routes), base_url="http://console.test")
    assert _login(client).status_code == 303
    team.cohort_list = [
        cohort(1, name=EVIL, is_static=True, count=2),
        cohort(
            2,
            name="Pros",
            filters={"properties": {"type": "AND", "values": [_rule("plan", EVIL)]}},
        ),
    ]
    team.members = {1: ["ann", EVIL]}
    team.group_list = [Group(0, "company", "acme/eu", {"size": 3, "name": EVIL}, NOW)]
    team.flags = [PersonFlag(5, "b2b-beta", True, None, "Matched condition set 1")]
    team.warning_list = [Warning(1, "event_too_large", {"detail": EVIL, "event": "big"}, NOW)]
    return client, team, data


PAGES = [
    "/members",
    "/cohorts",
    "/cohorts/1",
    "/cohorts/2",
    "/groups/0",
    "/groups/0/acme/eu",
    "/ingestion_warnings",
    "/settings/project",
    "/events",
]


@pytest.mark.parametrize("path", PAGES)
def test_team_pages_render_labelled_and_escaped(path: str) -> None:
    client, _, _ = _client()
    page = client.get(path)
    assert page.status_code == 200, page.text
    assert EVIL not in page.text  # escaped wherever it is shown
    assert "script-src 'self'" in page.headers["content-security-policy"]
    if path != "/ingestion_warnings":  # a page of tables only
        _check_accessible(page.text)


def test_new_cohort_page_offers_the_builder_and_the_csv_upload() -> None:
    client, _, _ = _client(Role.EDITOR)
    page = client.get("/cohorts/new")
    assert page.status_code == 200
    controls = _check_accessible(page.text)
    assert "Upload CSV and create static cohort" in controls.buttons
    assert "Create cohort" in controls.buttons and "Add condition set" in controls.buttons
    # cohorts are built from person properties and other cohorts only
    assert 'value="group"' not in page.text.split('data-template="filter"')[1]


def test_viewers_see_team_pages_without_changes() -> None:
    client, _, _ = _client(Role.VIEWER)
    cohorts = client.get("/cohorts")
    assert cohorts.status_code == 200 and "New cohort" not in cohorts.text
    assert client.get("/cohorts/new").status_code == 403
    for path in ("/cohorts/1", "/cohorts/2"):
        page = client.get(path).text
        assert "read-only" in page
        assert not re.search(r"<button[^>]*>(Save|Delete|Upload)", page)
    members = client.get("/members").text
    assert "Add member" not in members and "Remove " not in members
    assert "Change role" not in members and "bob+&lt;b&gt;@example.com" in members
    settings = client.get("/settings/project").text
    assert "Rename project" not in settings and "Copy project token" in settings
    assert "Save retention" not in settings


def test_admins_manage_members_but_not_the_only_admin() -> None:
    client, _, _ = _client(Role.ADMIN)
    controls = _check_accessible(client.get("/members").text)
    assert "Add member" in controls.buttons
    assert "Remove bob+<b>@example.com" in controls.buttons
    assert "Remove ada@example.com" not in controls.buttons  # the only admin
    assert "Change role of ada@example.com" in controls.buttons


def test_page_contents() -> None:
    client, team, data = _client()
    static = client.get("/cohorts/1").text
    assert "First distinct ids" in static and "&lt;script&gt;" in static
    settings = client.get("/settings/project").text
    assert "phc_public_token" in settings and "1,000,000 or more" in settings
    assert "600 requests per minute" in settings
    assert "Events are kept forever." in settings and "Save retention" in settings
    team.retention[1] = 30
    settings = client.get("/settings/project").text
    assert "older than 30 days are deleted" in settings and 'value="30"' in settings
    group = client.get("/groups/0/acme/eu").text
    assert "b2b-beta" in group and "Matched condition set 1" in group
    assert client.get("/groups/0/nope").status_code == 404
    assert client.get("/groups/7").status_code == 404
    assert client.get("/cohorts/99").status_code == 404
    assert "acme/eu" in client.get("/groups/0?search=ACME").text
    assert "No groups match" in client.get("/groups/0?search=zzz").text
    assert client.get("/groups", follow_redirects=False).headers["location"] == "/groups/0"
    warnings = client.get("/ingestion_warnings").text
    assert "Event too large" in warnings and "big" in warnings
    events = client.get("/events").text
    assert 'role="img"' in events and "Events per minute" in events
    assert '<title id="events-per-minute-title">' in events
    assert data.chart_start % MINUTE == 0
