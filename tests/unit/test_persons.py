"""Person and group rules, table-driven, on the pure books (no store)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from flagstaff.ingest import groups as g
from flagstaff.ingest import persons as p
from flagstaff.ingest.model import Event
from tests.events import T0
from tests.events import event as ev


def person(
    pid: int, props: dict[str, Any] | None = None, identified: bool = False
) -> p.PersonState:
    return p.PersonState(pid, f"uuid-{pid}", dict(props or {}), identified, T0 - 1000)


def run(events: list[Event], loaded: dict[str, p.PersonState] | None = None) -> p.PersonBook:
    book = p.PersonBook(1, loaded or {})
    for e in events:
        p.apply_event(book, e)
    return book


def test_first_event_creates_a_person_with_set_and_set_once() -> None:
    book = run([ev("$pageview", "u1", set={"a": 1}, set_once={"b": 2})])
    state = book.get("u1")
    assert state is not None and state.is_new and state.id is None
    assert state.properties == {"a": 1, "b": 2}
    assert state.uuid == p.person_uuid(1, "u1")
    assert [type(op) for op in book.ops] == [p.CreatePerson, p.AssignDistinctId]


@pytest.mark.parametrize(
    ("before", "kwargs", "after"),
    [
        ({"a": 1}, {"set": {"a": 2}}, {"a": 2}),
        ({"a": 1}, {"set_once": {"a": 2}}, {"a": 1}),
        ({}, {"set_once": {"a": 2}}, {"a": 2}),
        ({"a": 1, "b": 2}, {"unset": ["a"]}, {"b": 2}),
        ({"a": 1}, {"set": {"a": True}}, {"a": True}),
        ({"a": 1}, {"set": {"b": 1}, "set_once": {"b": 9}}, {"a": 1, "b": 1}),
    ],
)
def test_property_updates(before: dict, kwargs: dict, after: dict) -> None:
    loaded = {"u": person(5, before)}
    book = run([ev("x", "u", **kwargs)], loaded)
    assert book.get("u").properties == after  # type: ignore[union-attr]
    assert (book.changed() != []) is (repr(before) != repr(after))


def test_event_properties_lift_onto_the_person_with_initial_values() -> None:
    book = run(
        [
            ev("$pageview", "u", props={"$browser": "Firefox", "utm_source": "ad"}),
            ev("$pageview", "u", props={"$browser": "Chrome", "utm_source": "mail"}, ts=T0 + 1),
        ]
    )
    props = book.get("u").properties  # type: ignore[union-attr]
    assert props["$browser"] == "Chrome" and props["$initial_browser"] == "Firefox"
    assert props["utm_source"] == "mail" and props["$initial_utm_source"] == "ad"


@pytest.mark.parametrize(
    ("name", "kwargs", "browser", "changed"),
    [
        # only churning properties already on the person: PostHog writes nothing
        ("$pageview", {"props": {"$browser": "Chrome", "$current_url": "/b"}}, "Firefox", False),
        ("$pageview", {"set": {"$os": "Mac"}}, "Firefox", False),
        # anything else changing carries the churning ones with it
        ("$pageview", {"props": {"$browser": "Chrome"}, "set": {"plan": "pro"}}, "Chrome", True),
        ("$pageview", {"props": {"$browser": "Chrome", "utm_source": "mail"}}, "Chrome", True),
        ("$pageview", {"props": {"$browser": "Chrome"}, "unset": ["plan"]}, "Chrome", True),
        # person events always apply everything
        ("$set", {"props": {"$browser": "Chrome"}}, "Chrome", True),
        ("$identify", {"props": {"$browser": "Chrome"}}, "Chrome", True),
        # never updates persons
        ("$exception", {"props": {"$os": "Linux"}, "set": {"plan": "max"}}, "Firefox", False),
    ],
)
def test_churning_properties_alone_do_not_update_the_person(
    name: str, kwargs: dict, browser: str, changed: bool
) -> None:
    before = {"$browser": "Firefox", "$current_url": "/a", "$os": "Mac", "utm_source": "ad"}
    before |= {"$initial_browser": "Firefox", "$initial_current_url": "/a", "$initial_os": "Mac"}
    before |= {"$initial_utm_source": "ad", "plan": "free"}
    book = run([ev(name, "u", **kwargs)], {"u": person(4, before)})
    state = book.get("u")
    assert state is not None and state.properties["$browser"] == browser
    assert (book.changed() != []) is changed
    if not changed:
        assert state.properties == before


def test_explicit_set_wins_over_lifted_property() -> None:
    book = run([ev("$pageview", "u", props={"$os": "Linux"}, set={"$os": "Mac"})])
    assert book.get("u").properties["$os"] == "Mac"  # type: ignore[union-attr]


def test_anonymous_events_update_no_person() -> None:
    book = run([ev("x", "anon", set={"a": 1}, process_person=False)])
    assert book.get("anon") is None and book.ops == []


def test_identified_distinct_id_keeps_full_processing() -> None:
    loaded = {"u": person(3, {"a": 1}, identified=True)}
    book = run([ev("x", "u", set={"a": 2}, process_person=False)], loaded)
    assert book.get("u").properties == {"a": 2}  # type: ignore[union-attr]


def test_identify_merges_anonymous_into_new_identified_id() -> None:
    loaded = {"anon": person(1, {"seen": True})}
    book = run(
        [ev("$identify", "user@x", props={"$anon_distinct_id": "anon"}, set={"email": "e"})],
        loaded,
    )
    state = book.get("user@x")
    assert state is loaded["anon"] and state.is_identified
    assert state.properties == {"seen": True, "email": "e"}
    assert p.AssignDistinctId("user@x", state) in book.ops


def test_identify_with_both_persons_merges_and_target_properties_win() -> None:
    anon = person(1, {"a": "anon", "only_anon": 1})
    user = person(2, {"a": "user"})
    anon.created_at_ms = T0 - 5000
    book = run(
        [ev("$identify", "user", props={"$anon_distinct_id": "anon"})],
        {"anon": anon, "user": user},
    )
    assert book.get("anon") is user and book.get("user") is user
    assert user.properties == {"a": "user", "only_anon": 1}
    assert user.created_at_ms == T0 - 5000 and user.is_identified
    assert p.MergePersons(anon, user) in book.ops
    assert book.changed() == [user]


def test_no_merge_of_an_already_identified_person() -> None:
    other = person(1, identified=True)
    into = person(2)
    book = run([ev("$identify", "b", props={"$anon_distinct_id": "a"})], {"a": other, "b": into})
    assert book.get("a") is other and book.get("b") is into
    assert [w.kind for w in book.warnings] == ["cannot_merge_already_identified"]


def test_merge_dangerously_merges_identified_persons() -> None:
    other = person(1, identified=True)
    into = person(2)
    book = run([ev("$merge_dangerously", "b", props={"alias": "a"})], {"a": other, "b": into})
    assert book.get("a") is into


@pytest.mark.parametrize(
    "illegal", ["anonymous", "Guest", "undefined", "null", "0", "NaN", "[object Object]", " "]
)
def test_illegal_ids_are_never_merged(illegal: str) -> None:
    book = run([ev("$identify", "real", props={"$anon_distinct_id": illegal})])
    assert book.get(illegal) is None
    assert book.get("real") is not None
    assert book.warnings[0].kind == "cannot_merge_with_illegal_distinct_id"


def test_alias_with_neither_person_creates_one_with_both_ids() -> None:
    book = run([ev("$create_alias", "old", props={"alias": "new"})])
    assert book.get("old") is book.get("new") is not None
    assert book.get("old").is_identified  # type: ignore[union-attr]


def test_alias_onto_existing_person() -> None:
    existing = person(7)
    book = run([ev("$create_alias", "old", props={"alias": "new"})], {"old": existing})
    assert book.get("new") is existing


def test_same_id_merge_is_a_plain_update() -> None:
    book = run([ev("$identify", "u", props={"$anon_distinct_id": "u"}, set={"a": 1})])
    assert book.get("u").properties == {"a": 1}  # type: ignore[union-attr]
    assert not book.warnings


def test_updates_apply_in_arrival_order() -> None:
    book = run(
        [
            ev("x", "u", set={"plan": "free"}),
            ev("$identify", "v", props={"$anon_distinct_id": "u"}),
            ev("x", "v", set={"plan": "pro"}),
            ev("x", "u", set_once={"plan": "ignored", "first": 1}),
        ]
    )
    state = book.get("u")
    assert state is book.get("v")
    assert state.properties == {"plan": "pro", "first": 1}  # type: ignore[union-attr]


def test_groupidentify_creates_no_person() -> None:
    book = run([ev("$groupidentify", "$company_x", props={"$group_type": "company"})])
    assert book.ops == []


def test_ids_to_load_covers_merge_partners() -> None:
    events = [
        ev("$identify", "a", props={"$anon_distinct_id": "b"}),
        ev("$create_alias", "c", props={"alias": "d"}),
        ev("$groupidentify", "g"),
    ]
    assert p.ids_to_load(events) == {"a", "b", "c", "d"}


# groups --------------------------------------------------------------------------------------


def gi(group_type: Any, key: Any, group_set: Any = None, ts: int = T0) -> Event:
    props: dict[str, Any] = {"$group_type": group_type, "$group_key": key}
    if group_set is not None:
        props["$group_set"] = group_set
    return ev("$groupidentify", "d", props=props, ts=ts)


def test_group_identify_creates_then_updates() -> None:
    book = g.GroupBook({}, {})
    assert g.apply_group_identify(book, gi("company", "acme", {"name": "Acme"})) is None
    assert g.apply_group_identify(book, gi("company", "acme", {"plan": "pro"})) is None
    state = book.groups[(0, "acme")]
    assert state.properties == {"name": "Acme", "plan": "pro"} and state.is_new
    assert book.new_types == [g.NewGroupType(0, "company")]


def test_group_type_indexes_first_come_first_served_up_to_five() -> None:
    book = g.GroupBook({"project": 1}, {})
    for name in ["a", "b", "c", "d"]:
        assert g.apply_group_identify(book, gi(name, "k")) is None
    assert book.types == {"project": 1, "a": 0, "b": 2, "c": 3, "d": 4}
    assert g.apply_group_identify(book, gi("sixth", "k")) == "group_type_limit_reached"
    assert g.apply_group_identify(book, gi("a", "k2")) is None


def test_unchanged_group_is_not_rewritten() -> None:
    existing = g.GroupState(0, "acme", {"name": "Acme"}, T0)
    book = g.GroupBook({"company": 0}, {(0, "acme"): existing})
    g.apply_group_identify(book, gi("company", "acme", {"name": "Acme"}))
    assert book.changed() == []
    g.apply_group_identify(book, gi("company", "acme", {"name": "Acme Inc"}))
    assert book.changed() == [existing]


def test_invalid_group_identify() -> None:
    book = g.GroupBook({}, {})
    assert g.apply_group_identify(book, gi(5, "k")) == "invalid_group_identify"


def test_person_uuids_are_the_standard_version_5_uuids() -> None:
    """Stored person uuids must not change with the library that computes them."""
    namespace = uuid.UUID("9f1d7a4e-5b0c-4c2a-8e43-f1a9c3b2d6e1")
    for project_id, distinct_id in ((1, "u1"), (7, "é-ü 🎉"), (2, "")):
        expected = str(uuid.uuid5(namespace, f"{project_id}:{distinct_id}"))
        assert p.person_uuid(project_id, distinct_id) == expected


def test_only_enrollment_changes_and_merges_mark_a_person_for_its_enrollments() -> None:
    book = p.PersonBook(1, {})
    key = p.ENROLLMENT_PREFIX + "dark"
    p.apply_event(book, ev("$pageview", "a", set={"plan": "pro"}))
    p.apply_event(book, ev("$pageview", "b", set={key: True}))
    p.apply_event(book, ev("$pageview", "c", set_once={"x": 1}, unset=["plan"]))
    a, b, c = (book.get(d) for d in "abc")
    assert a is not None and b is not None and c is not None
    assert (a.enrollment, b.enrollment, c.enrollment) == (False, True, False)
    b.enrollment = False
    p.apply_event(book, ev("$pageview", "b", set={key: True}))  # unchanged: nothing to do
    assert not b.enrollment
    p.apply_event(book, ev("$pageview", "b", unset=[key]))
    assert b.enrollment and p.enrolled_flags(b.properties) == []
    p.apply_event(book, ev("$pageview", "c", set={key: "true"}))
    p.apply_event(book, ev("$identify", "a", props={"$anon_distinct_id": "c"}))  # c into a
    assert a.enrollment and c.enrollment  # c's rows go, a's are written again
    assert p.enrolled_flags(a.properties) == ["dark"]
    assert p.enrolled_flags({key: 1, p.ENROLLMENT_PREFIX: True, "other": True}) == []
