"""Survey stats and answer summaries, folded in one event at a time."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from flagstaff.surveys import stats
from flagstaff.surveys.stats import DISMISSED, SENT, SHOWN, SurveyStats

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


RATING = {"id": "q-rate", "type": "rating", "question": "How likely?", "scale": 10}
CHOICE = {
    "id": "q-why",
    "type": "single_choice",
    "question": "Why?",
    "choices": ["Price", "Speed", "Other"],
    "hasOpenChoice": True,
}
MULTI = {"id": "q-use", "type": "multiple_choice", "question": "Uses?", "choices": ["A", "B"]}
OPEN = {"id": "q-more", "type": "open", "question": "Anything else?"}
QUESTIONS = [RATING, CHOICE, MULTI, OPEN]


def sent(person: str, minute: int, answers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    props = {
        "$survey_id": "s1",
        "$survey_questions": [{"id": q["id"], "question": q["question"]} for q in QUESTIONS],
        **{f"$survey_response_{k}": v for k, v in answers.items()},
        **extra,
    }
    return event(SENT, person, minute, props)


def event(name: str, person: str, minute: int, props: dict[str, Any] | None = None) -> dict:
    return {
        "event": name,
        "properties": props or {"$survey_id": "s1"},
        "person": person,
        "timestamp_ms": ms(T0 + timedelta(minutes=minute)),
        "uuid": f"{name}-{person}-{minute}",
    }


EVENTS = [
    event(SHOWN, "p1", 0),
    event(SHOWN, "p1", 1),
    event(SHOWN, "p2", 2),
    event(SHOWN, "p3", 3),
    event(SHOWN, "p4", 4),
    sent("p1", 5, {"q-rate": 10, "q-why": "Price", "q-use": ["A", "B"], "q-more": "Great"}),
    sent("p2", 6, {"q-rate": "3", "q-why": "Too slow to load", "q-use": ["B"]}),
    event(DISMISSED, "p2", 7),
    event(DISMISSED, "p3", 8),
    event(DISMISSED, "p4", 9, {"$survey_id": "s1", "$survey_partially_completed": True}),
    event("$pageview", "p4", 10),
]


def test_counts_and_rates_as_posthog_reports_them() -> None:
    body = stats.stats_json(stats.build(EVENTS))
    shown, dismissed, sent_ = (body["stats"][e] for e in (SHOWN, DISMISSED, SENT))
    assert shown == {
        "total_count": 5,
        "unique_persons": 4,
        "first_seen": "2026-05-01T12:00:00Z",
        "last_seen": "2026-05-01T12:04:00Z",
        # 4 persons saw it, p3 dismissed (p2 dismissed but answered), p1 and p2 answered
        "unique_persons_only_seen": 1,
        "total_count_only_seen": 1,
    }
    assert (dismissed["total_count"], dismissed["unique_persons"]) == (2, 1)
    assert (sent_["total_count"], sent_["unique_persons"]) == (2, 2)
    assert body["rates"] == {
        "response_rate": 40.0,
        "dismissal_rate": 40.0,
        "unique_users_response_rate": 50.0,
        "unique_users_dismissal_rate": 25.0,
    }


def test_empty_stats_have_every_event_and_zero_rates() -> None:
    body = stats.stats_json(SurveyStats())
    assert set(body["stats"]) == {SHOWN, DISMISSED, SENT}
    assert body["stats"][SENT]["first_seen"] is None
    assert body["rates"]["response_rate"] == 0.0


def test_order_of_arrival_does_not_matter_and_state_round_trips() -> None:
    expected = stats.stats_json(stats.build(EVENTS))
    expected_summary = stats.summary(stats.build(EVENTS), QUESTIONS)
    shuffled = list(EVENTS)
    random.Random(4).shuffle(shuffled)
    state = SurveyStats()
    for e in shuffled:
        # keep it in a store between events
        state = stats.decode(stats.encode(state))
        state.add(
            e["event"],
            e["properties"],
            person=e["person"],
            timestamp_ms=e["timestamp_ms"],
            uuid=e["uuid"],
        )
    assert stats.stats_json(state) == expected
    assert stats.summary(state, QUESTIONS) == expected_summary


def test_partial_responses_count_once_per_submission_with_the_latest_answers() -> None:
    state = stats.build(
        [
            sent(
                "p1",
                1,
                {"q-rate": 2},
                **{"$survey_submission_id": "sub-1", "$survey_completed": False},
            ),
            sent("p1", 2, {"q-rate": 9, "q-why": "Speed"}, **{"$survey_submission_id": "sub-1"}),
            # an older event of the same submission arriving late changes nothing
            sent("p1", 0, {"q-rate": 0}, **{"$survey_submission_id": "sub-1"}),
        ]
    )
    assert state.responses == 1
    summary = stats.summary(state, QUESTIONS)
    rating = summary["questions"][0]
    assert rating["response_count"] == 1 and rating["distribution"]["9"] == 1
    assert sum(rating["distribution"].values()) == 1
    assert summary["questions"][1]["choices"]["Speed"] == 1


def test_summary_per_question() -> None:
    summary = stats.summary(stats.build(EVENTS), QUESTIONS)
    assert summary["responses"] == 2
    rating, choice, multi, open_ = summary["questions"]
    assert rating["distribution"] == {str(v): int(v in (3, 10)) for v in range(11)}
    assert rating["average"] == 6.5 and rating["nps"] == 0.0 and rating["response_count"] == 2
    assert choice["choices"] == {"Price": 1, "Speed": 0, "Other": 0}
    assert choice["open_choice_count"] == 1
    assert [r["response"] for r in choice["open_answers"]["results"]] == ["Too slow to load"]
    assert multi["choices"] == {"A": 1, "B": 2} and multi["response_count"] == 2
    assert open_["open_answers"]["count"] == 1
    assert open_["open_answers"]["results"][0] == {
        "response": "Great",
        "person": "p1",
        "timestamp": "2026-05-01T12:05:00Z",
        "iteration": None,
    }
    only = stats.summary(stats.build(EVENTS), QUESTIONS, question_id="q-why")
    assert [q["id"] for q in only["questions"]] == ["q-why"]


def test_open_answers_are_paginated_newest_first() -> None:
    events = [sent(f"p{i}", i, {"q-more": f"answer {i}"}) for i in range(7)]
    state = stats.build(events)
    page = stats.summary(state, [OPEN], limit=3, offset=0)["questions"][0]["open_answers"]
    assert page["count"] == 7
    assert [r["response"] for r in page["results"]] == ["answer 6", "answer 5", "answer 4"]
    last = stats.summary(state, [OPEN], limit=3, offset=6)["questions"][0]["open_answers"]
    assert [r["response"] for r in last["results"]] == ["answer 0"]


def test_legacy_positional_answers_map_to_questions_by_position() -> None:
    legacy = event(
        SENT, "p9", 1, {"$survey_id": "s1", "$survey_response": 7, "$survey_response_1": "Speed"}
    )
    modern_keys_only = event(SENT, "p8", 2, {"$survey_id": "s1", "$survey_response_q-rate": 8})
    state = stats.build([legacy, modern_keys_only])
    rating, choice = stats.summary(state, [RATING, CHOICE])["questions"]
    assert rating["distribution"]["7"] == 1 and rating["distribution"]["8"] == 1
    assert choice["choices"]["Speed"] == 1
    assert stats.extract_answers({"$survey_response_abc": "x", "$survey_response": "y"}) == {
        "abc": "x"
    }


def test_other_events_and_iterations() -> None:
    state = SurveyStats()
    assert state.add("$pageview", {}, person="p", timestamp_ms=ms(T0), uuid="u") is False
    state.add(
        SENT,
        {"$survey_iteration": 2, "$survey_response_q-more": "hi"},
        person="p",
        timestamp_ms=ms(T0),
        uuid="u2",
    )
    page = stats.summary(state, [OPEN])["questions"][0]["open_answers"]
    assert page["results"][0]["iteration"] == 2


def test_ingest_helpers() -> None:
    props = {"$survey_id": 7, "$survey_response_q": "x", "$survey_questions": [], "$ip": "1.2.3.4"}
    assert stats.survey_id_of(SENT, props) == "7"
    assert stats.survey_id_of("$pageview", props) is None
    assert stats.survey_id_of(SHOWN, {"$survey_id": ""}) is None
    trimmed = stats.stats_properties(props)
    assert trimmed == {"$survey_id": 7, "$survey_response_q": "x", "$survey_questions": []}
    whole, cut = SurveyStats(), SurveyStats()
    whole.add(SENT, props, person="p", timestamp_ms=ms(T0), uuid="u")
    cut.add(SENT, trimmed, person="p", timestamp_ms=ms(T0), uuid="u")
    assert stats.encode(whole) == stats.encode(cut)
