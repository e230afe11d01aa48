"""The console's small view helpers: scheduled changes in words, typed JSON fields, event
summaries and property rows."""

from __future__ import annotations

import pytest

from flagstaff.console import views


def test_scheduled_changes_in_words() -> None:
    assert views.describe_scheduled({"operation": "update_status", "value": True}) == (
        "Turn the flag on"
    )
    assert views.describe_scheduled({"operation": "update_status", "value": False}) == (
        "Turn the flag off"
    )
    assert views.describe_scheduled({"operation": "update_rollout", "value": 25}) == (
        "Set the rollout of every condition set to 25%"
    )
    assert views.describe_scheduled({"operation": "update_rollout", "value": 5, "group": 1}) == (
        "Set the rollout of condition set 2 to 5%"
    )


def test_typed_json_fields() -> None:
    assert views.json_object("", "Groups") == {}
    assert views.json_object('{"plan": "gold"}', "Person properties") == {"plan": "gold"}
    with pytest.raises(ValueError, match="Person properties are not valid JSON"):
        views.json_object("{nope", "Person properties")
    with pytest.raises(ValueError, match="must be a JSON object"):
        views.json_object("[1]", "Groups")


def test_event_summary_prefers_the_url_then_plain_properties() -> None:
    assert views.event_summary({"$current_url": "https://a.example/x", "k": 1}) == (
        "https://a.example/x"
    )
    shown = views.event_summary({"$lib": "web", "plan": "gold", "n": 3, "tags": ["a"]})
    assert shown == 'plan=gold, n=3, tags=["a"]'


def test_property_rows_are_sorted_and_shown_as_text() -> None:
    assert views.property_rows({"b": 2, "a": "x", "c": {"d": True}}) == [
        ("a", "x"),
        ("b", "2"),
        ("c", '{"d":true}'),
    ]
