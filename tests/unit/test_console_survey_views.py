"""The survey pages' pure parts: statuses, the counters of a stats answer, a question's chart
and figures from a summary answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flagstaff.console import survey_views
from flagstaff.surveys import stats
from flagstaff.surveys.model import Survey

NOW = datetime(2026, 1, 10, tzinfo=UTC)


def test_statuses_follow_the_dates() -> None:
    survey = Survey(id="s", name="S", type="popover")
    assert survey_views.status_of(survey, NOW) == "draft"
    started = Survey(id="s", name="S", type="popover", start_date=NOW - timedelta(days=1))
    assert survey_views.status_of(started, NOW) == "running"
    later = Survey(id="s", name="S", type="popover", start_date=NOW + timedelta(days=1))
    assert survey_views.status_of(later, NOW) == "scheduled"
    ended = Survey(
        id="s", name="S", type="popover", start_date=NOW - timedelta(days=2), end_date=NOW
    )
    assert survey_views.status_of(ended, NOW) == "complete"


def test_counters_carry_the_stats_answer() -> None:
    shown, dismissed, sent = survey_views.counters(stats.stats_json(stats.SurveyStats()))
    assert (shown.label, shown.total, dismissed.rate, sent.rate) == (
        "Shown",
        0,
        "0% of shown",
        "0% of shown",
    )


def test_an_nps_question_has_its_groups_and_score() -> None:
    summary = {
        "id": "q",
        "index": 0,
        "type": "rating",
        "question": "Recommend us?",
        "response_count": 4,
        "scale": 10,
        "distribution": {str(v): {10: 1, 9: 1, 3: 1, 8: 1}.get(v, 0) for v in range(11)},
        "average": 7.5,
        "nps": 25.0,
    }
    view = survey_views.question_view(summary)
    assert view.figure == "NPS 25 · average 7.5"
    assert view.chart is not None
    assert "Detractors (0-6): 1, Passives (7-8): 1, Promoters (9-10): 2" in view.chart


def test_open_answers_are_listed_as_given() -> None:
    summary = {
        "id": "q",
        "index": 1,
        "type": "open",
        "question": "Why?",
        "response_count": 2,
        "open_answers": {
            "count": 2,
            "results": [
                {"response": "newer", "person": "p2", "timestamp": "2026-01-02T00:00:00Z"},
                {"response": ["a", "b"], "person": "p1", "timestamp": "2026-01-01T00:00:00Z"},
            ],
        },
    }
    view = survey_views.question_view(summary)
    assert [a.response for a in view.answers] == ["newer", "a, b"]
    assert view.chart is None and view.answers_count == 2
