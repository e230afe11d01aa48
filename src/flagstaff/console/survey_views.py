"""What the survey pages show, from stored surveys and the stats and summary the management API
answers (``surveys.stats.stats_json`` and ``surveys.stats.summary``, the functions behind
``/surveys/<id>/stats/`` and ``/summary/``). Charts are inline SVG (``usage_charts``). Pure."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec
from markupsafe import Markup

from flagstaff.common.clock import minute_text
from flagstaff.console import usage_charts
from flagstaff.surveys.model import Survey, has_ended, has_started
from flagstaff.surveys.stats import DISMISSED, SENT, SHOWN

Status = Literal["draft", "scheduled", "running", "complete", "archived"]
TYPE_LABELS = {"popover": "Popover", "widget": "Feedback widget", "api": "API"}
QUESTION_LABELS = {
    "open": "Open text",
    "rating": "Rating",
    "single_choice": "Single choice",
    "multiple_choice": "Multiple choice",
    "link": "Link",
}
NPS_GROUPS = (
    ("Detractors (0-6)", tuple(range(0, 7))),
    ("Passives (7-8)", (7, 8)),
    ("Promoters (9-10)", (9, 10)),
)


def status_of(survey: Survey, now: datetime) -> Status:
    if survey.archived:
        return "archived"
    if survey.start_date is None:
        return "draft"
    if has_ended(survey, now):
        return "complete"
    return "running" if has_started(survey, now) else "scheduled"


class SurveyRow(msgspec.Struct, frozen=True):
    id: str
    name: str
    type: str
    status: Status
    responses: int
    start: str
    end: str


def survey_row(survey: Survey, responses: int, now: datetime) -> SurveyRow:
    return SurveyRow(
        id=survey.id,
        name=survey.name,
        type=TYPE_LABELS.get(survey.type, survey.type),
        status=status_of(survey, now),
        responses=responses,
        start=minute_text(survey.start_date),
        end=minute_text(survey.end_date),
    )


class Counter(msgspec.Struct, frozen=True):
    label: str
    total: int
    persons: int
    rate: str


def counters(stats_json: dict[str, Any]) -> list[Counter]:
    """Shown, dismissed and sent: counts, unique persons and the rates of the stats answer."""
    stats, rates = stats_json["stats"], stats_json["rates"]
    return [
        Counter("Shown", stats[SHOWN]["total_count"], stats[SHOWN]["unique_persons"], ""),
        Counter(
            "Dismissed",
            stats[DISMISSED]["total_count"],
            stats[DISMISSED]["unique_persons"],
            f"{rates['dismissal_rate']:g}% of shown",
        ),
        Counter(
            "Sent",
            stats[SENT]["total_count"],
            stats[SENT]["unique_persons"],
            f"{rates['response_rate']:g}% of shown",
        ),
    ]


class OpenAnswer(msgspec.Struct, frozen=True):
    response: str
    person: str
    timestamp: str


class QuestionView(msgspec.Struct, frozen=True):
    index: int
    id: str
    question: str
    kind: str
    response_count: int
    chart: Markup | None
    figure: str
    """A headline figure: the average rating, or the NPS."""
    answers: list[OpenAnswer]
    answers_count: int


def _rating_chart(chart_id: str, text: str, distribution: dict[str, int]) -> Markup:
    labels = list(distribution)
    counts = [distribution[k] for k in labels]
    words = ", ".join(f"{k}: {n}" for k, n in distribution.items())
    return usage_charts.stacked_bars(
        chart_id,
        f"{text}: answers per rating",
        f"Answers per rating: {words}.",
        labels,
        [("Answers", counts)],
        x_title="Rating",
        y_title="Answers",
        height=200,
        tick_every=1,
    )


def _shares(chart_id: str, title: str, items: list[tuple[str, int]], x_title: str) -> Markup:
    total = sum(n for _, n in items)
    rows = [(name, n, n / total if total else 0.0, i) for i, (name, n) in enumerate(items)]
    words = ", ".join(f"{name}: {n}" for name, n in items)
    return usage_charts.share_bars(chart_id, title, f"{words}.", rows, x_title=x_title)


def question_view(summary: dict[str, Any]) -> QuestionView:
    """One question of the summary answer, with its chart."""
    index, kind = int(summary["index"]), str(summary["type"])
    text = str(summary.get("question") or f"Question {index + 1}")
    chart: Markup | None = None
    figure = ""
    chart_id = f"question-{index}"
    if kind == "rating":
        distribution = summary.get("distribution") or {}
        if summary.get("scale") == 10:
            groups = [
                (name, sum(distribution.get(str(v), 0) for v in values))
                for name, values in NPS_GROUPS
            ]
            chart = Markup(
                _rating_chart(chart_id, text, distribution)
                + _shares(f"{chart_id}-nps", f"{text}: NPS groups", groups, "Share of answers")
            )
            nps = summary.get("nps")
            figure = f"NPS {nps:g}" if nps is not None else ""
        else:
            chart = _rating_chart(chart_id, text, distribution)
        average = summary.get("average")
        if average is not None:
            figure = f"{figure} · average {average:g}" if figure else f"Average {average:g}"
    elif kind in ("single_choice", "multiple_choice"):
        items = list((summary.get("choices") or {}).items())
        if summary.get("open_choice_count"):
            items.append(("Other (own answer)", int(summary["open_choice_count"])))
        chart = _shares(chart_id, f"{text}: answers per choice", items, "Share of answers")
    page = summary.get("open_answers") or {"count": 0, "results": []}
    answers = [
        OpenAnswer(
            response=r["response"] if isinstance(r["response"], str) else ", ".join(r["response"]),
            person=str(r["person"]),
            timestamp=str(r["timestamp"] or ""),
        )
        for r in page["results"]
    ]
    return QuestionView(
        index=index,
        id=str(summary.get("id") or ""),
        question=text,
        kind=QUESTION_LABELS.get(kind, kind),
        response_count=int(summary["response_count"]),
        chart=chart,
        figure=figure,
        answers=answers,
        answers_count=int(page["count"]),
    )
