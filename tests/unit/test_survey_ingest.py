"""The engine-neutral part of counting survey events at ingest, and merged stats."""

from __future__ import annotations

from flagstaff.ingest import persons as person_rules
from flagstaff.store.ingest_batch import fold_survey_events, survey_events
from flagstaff.surveys import stats
from tests.events import T0, event

SID = "0193a000-0000-4000-8000-00000000000a"


def _sent(distinct_id: str, submission: str, answer: str, ts: int = T0) -> object:
    return event(
        "survey sent",
        distinct_id,
        props={
            "$survey_id": SID,
            "$survey_submission_id": submission,
            "$survey_response": answer,
            "$current_url": "https://a.test/",
        },
        ts=ts,
    )


def test_only_survey_events_with_an_id_are_picked_and_trimmed() -> None:
    events = [
        event("$pageview", "u1"),
        _sent("u1", "s1", "yes"),
        event("survey shown", "u2", props={}),  # no $survey_id: not counted
    ]
    found = survey_events(events)  # type: ignore[arg-type]
    assert [(e.survey_id, e.event, e.person) for e in found] == [(SID, "survey sent", "u1")]
    assert "$current_url" not in found[0].properties
    assert found[0].properties["$survey_response"] == "yes"


def test_the_person_is_the_persons_uuid_when_the_batch_knows_it() -> None:
    book = person_rules.PersonBook(1, {})
    e = _sent("u1", "s1", "yes")
    person_rules.apply_event(book, e)
    state = book.by_distinct_id["u1"]
    assert state.uuid and state.uuid != "u1"
    assert survey_events([e], book)[0].person == state.uuid


def test_fold_counts_known_surveys_and_reports_the_limit_crossing() -> None:
    found = survey_events([_sent("u1", "s1", "yes"), _sent("u2", "s2", "no", T0 + 1)])
    before = stats.SurveyStats()
    before.add("survey sent", {"$survey_id": SID}, person="u0", timestamp_ms=T0 - 5, uuid="x")
    changes = fold_survey_events(found, {SID: stats.encode(before)}, {SID: 3})
    assert len(changes) == 1 and changes[0].responses == 3 and changes[0].limit_reached
    again = fold_survey_events(found, {SID: changes[0].state}, {SID: 3})
    # the same submissions again: not counted twice, and the limit was already reached
    assert again[0].responses == 3 and not again[0].limit_reached
    assert fold_survey_events(found, {}, {}) == []  # the survey does not exist


def test_merge_adds_counts_and_counts_a_person_once() -> None:
    a, b = stats.SurveyStats(), stats.SurveyStats()
    a.add("survey shown", {}, person="p1", timestamp_ms=10, uuid="1")
    b.add("survey shown", {}, person="p1", timestamp_ms=5, uuid="2")
    b.add("survey shown", {}, person="p2", timestamp_ms=20, uuid="3")
    merged = stats.stats_json(stats.merge([a, b]))["stats"]["survey shown"]
    assert merged["total_count"] == 3 and merged["unique_persons"] == 2
    assert merged["first_seen"] < merged["last_seen"]
