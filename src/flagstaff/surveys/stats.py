"""Survey statistics from survey events, kept up to date one event at a time.

``SurveyStats`` is the aggregate of one survey; ``add`` folds in one ``survey shown`` /
``survey dismissed`` / ``survey sent`` event (the same result whatever the order of arrival),
``encode`` / ``decode`` turn it into bytes a store keeps next to the survey, so the ingest path
updates it in the same transaction as the events (or a scan of the survey's events builds it).

The counts follow PostHog's survey stats endpoint:

* per event: total count, unique persons, first and last seen;
* ``survey dismissed`` events with ``$survey_partially_completed: true`` do not count;
* ``survey sent`` events count once per ``$survey_submission_id`` (partial responses send one
  event per answered question with the same id; the latest one holds the answers);
* a person who dismissed and also answered counts as answered only;
* ``survey shown`` also reports who only saw it (``*_only_seen``);
* rates are percentages of ``survey shown``, rounded to 2 places.

Answers are read from ``$survey_response_<question id>``; events from older posthog-js name
them by question position (``$survey_response`` for the first, ``$survey_response_<index>``).
``summary`` gives per question: choice counts (single and multiple choice, open choice answers
apart), rating distribution (and NPS on a 0-10 scale), and the open answers, newest first, a
page at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from flagstaff.surveys.model import format_datetime

SHOWN = "survey shown"
DISMISSED = "survey dismissed"
SENT = "survey sent"
EVENTS = (SHOWN, DISMISSED, SENT)
_BIT = {SHOWN: 1, DISMISSED: 2, SENT: 4}
RESPONSE_PREFIX = "$survey_response"
_ID_PREFIX = RESPONSE_PREFIX + "_"
POSITION_KEY = "#"  # answers known only by question position are kept under "#<index>"
DEFAULT_PAGE = 50
MAX_PAGE = 500


class EventCounts(msgspec.Struct, kw_only=True):
    """Times are milliseconds since the epoch (cheap to keep and decode)."""

    total: int = 0
    first_seen: int | None = None
    last_seen: int | None = None

    def seen(self, at: int) -> None:
        if self.first_seen is None or at < self.first_seen:
            self.first_seen = at
        if self.last_seen is None or at > self.last_seen:
            self.last_seen = at


class Submission(msgspec.Struct, kw_only=True):
    """The answers of one ``survey sent`` submission (its latest event)."""

    at: int
    person: str
    answers: dict[str, Any]
    iteration: int | None = None


class SurveyStats(msgspec.Struct, kw_only=True):
    """The aggregate of one survey's events; serialisable with ``encode``/``decode``."""

    counts: dict[str, EventCounts] = {}
    # person -> bit set of the events seen from them (1 shown, 2 dismissed, 4 sent)
    persons: dict[str, int] = {}
    # submission id (or the event uuid when the event has none) -> latest answers
    submissions: dict[str, Submission] = {}
    # question key -> answer value -> number of submissions choosing it
    choices: dict[str, dict[str, int]] = {}
    # question key -> number of submissions that answered it
    answered: dict[str, int] = {}

    @property
    def responses(self) -> int:
        """``survey sent`` count (one per submission): what ``responses_limit`` is checked on."""
        counts = self.counts.get(SENT)
        return counts.total if counts else 0

    def add(
        self,
        event: str,
        properties: Mapping[str, Any],
        *,
        person: str,
        timestamp_ms: int,
        uuid: str,
    ) -> bool:
        """Fold in one event; False when it is not a counted survey event.

        ``person`` is the person id when known (else the distinct id): unique counts are per
        person, as PostHog counts them. ``uuid`` is the event's, used as the submission of a
        ``survey sent`` event without ``$survey_submission_id``. ``timestamp_ms``: the event's
        time in milliseconds since the epoch (``ingest.model.Event.timestamp_ms``).
        """
        timestamp = timestamp_ms
        if event not in _BIT:
            return False
        if event == DISMISSED and properties.get("$survey_partially_completed") is True:
            return False
        if event == SENT:
            submission = properties.get("$survey_submission_id")
            key = str(submission) if submission not in (None, "") else f"uuid:{uuid}"
            iteration = properties.get("$survey_iteration")
            answers = extract_answers(properties)
            previous = self.submissions.get(key)
            if previous is None:
                self._count(event, timestamp)
            else:
                self._seen(event, timestamp)
                if timestamp < previous.at:
                    self.persons[person] = self.persons.get(person, 0) | _BIT[event]
                    return True
                self._tally(previous.answers, -1)
            self.submissions[key] = Submission(
                at=timestamp,
                person=person,
                answers=answers,
                iteration=iteration if isinstance(iteration, int) else None,
            )
            self._tally(answers, 1)
        else:
            self._count(event, timestamp)
        self.persons[person] = self.persons.get(person, 0) | _BIT[event]
        return True

    def _count(self, event: str, at: int) -> None:
        counts = self.counts.setdefault(event, EventCounts())
        counts.total += 1
        counts.seen(at)

    def _seen(self, event: str, at: int) -> None:
        self.counts.setdefault(event, EventCounts()).seen(at)

    def _tally(self, answers: Mapping[str, Any], step: int) -> None:
        for question, value in answers.items():
            values = _answer_values(value)
            if not values:
                continue
            self.answered[question] = self.answered.get(question, 0) + step
            per_value = self.choices.setdefault(question, {})
            for item in values:
                left = per_value.get(item, 0) + step
                if left:
                    per_value[item] = left
                else:
                    per_value.pop(item, None)
            if not self.answered[question]:
                del self.answered[question]
            if not per_value:
                del self.choices[question]


def survey_id_of(event: str, properties: Mapping[str, Any]) -> str | None:
    """The survey a survey event counts for; None for other events (and for a survey event
    without ``$survey_id``, which the ingest rules drop)."""
    if event not in _BIT:
        return None
    survey_id = properties.get("$survey_id")
    if survey_id is None or survey_id == "":
        return None
    return str(survey_id)


def stats_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The properties ``SurveyStats.add`` reads (every ``$survey_*`` key): what an ingest path
    that trims properties must keep for survey events."""
    return {k: v for k, v in properties.items() if k.startswith("$survey_")}


def encode(stats: SurveyStats) -> bytes:
    return msgspec.json.encode(stats)


def decode(data: bytes | str) -> SurveyStats:
    return msgspec.json.decode(data, type=SurveyStats)


def merge(aggregates: Iterable[SurveyStats]) -> SurveyStats:
    """The counts of several surveys together (the project-wide stats): totals add up, first
    and last seen span them all, a person counts once. Answers are not merged."""
    out = SurveyStats()
    for one in aggregates:
        for event, counts in one.counts.items():
            into = out.counts.setdefault(event, EventCounts())
            into.total += counts.total
            for at in (counts.first_seen, counts.last_seen):
                if at is not None:
                    into.seen(at)
        for person, bits in one.persons.items():
            out.persons[person] = out.persons.get(person, 0) | bits
    return out


def build(events: Sequence[Mapping[str, Any]]) -> SurveyStats:
    """The aggregate of a scan: each event a mapping with ``event``, ``properties``,
    ``person``, ``timestamp_ms`` and ``uuid``."""
    stats = SurveyStats()
    for e in events:
        stats.add(
            e["event"],
            e.get("properties") or {},
            person=e["person"],
            timestamp_ms=e["timestamp_ms"],
            uuid=e["uuid"],
        )
    return stats


def _when(ms: int | None) -> str | None:
    if ms is None:
        return None
    return format_datetime(datetime.fromtimestamp(ms / 1000, UTC))


def extract_answers(properties: Mapping[str, Any]) -> dict[str, Any]:
    """Question key -> answer of a ``survey sent`` event's properties.

    With ``$survey_questions`` (posthog-js since responses carry question ids), the answer of
    each listed question id is ``$survey_response_<id>``. Otherwise the id-named answers are
    used when there are any, else the positional ones (``$survey_response``,
    ``$survey_response_<n>``), kept as ``#<n>`` until ``summary`` maps them to questions.
    """
    listed = properties.get("$survey_questions")
    answers: dict[str, Any] = {}
    if isinstance(listed, list) and listed:
        for position, item in enumerate(listed):
            if not isinstance(item, dict):
                continue
            qid = item.get("id")
            if isinstance(qid, str) and qid:
                value = properties.get(_ID_PREFIX + qid, item.get("response"))
                if value is not None:
                    answers[qid] = value
            else:
                value = _positional(properties, position)
                if value is not None:
                    answers[f"{POSITION_KEY}{position}"] = value
        return answers
    positional: dict[str, Any] = {}
    for name, value in properties.items():
        if value is None:
            continue
        if name == RESPONSE_PREFIX:
            positional[f"{POSITION_KEY}0"] = value
        elif name.startswith(_ID_PREFIX):
            suffix = name[len(_ID_PREFIX) :]
            if suffix.isdigit():
                positional[f"{POSITION_KEY}{int(suffix)}"] = value
            elif suffix:
                answers[suffix] = value
    return answers or positional


def _positional(properties: Mapping[str, Any], position: int) -> Any:
    if position == 0:
        return properties.get(RESPONSE_PREFIX)
    return properties.get(f"{_ID_PREFIX}{position}")


def _answer_values(value: Any) -> list[str]:
    """The counted values of one answer: each choice of a list, else the value as text."""
    if isinstance(value, list):
        return [_text(v) for v in value if v is not None and _text(v) != ""]
    text = _text(value)
    return [text] if text != "" else []


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return value.strip()
    return str(value)


def _event_stats(stats: SurveyStats, event: str) -> dict[str, Any]:
    counts = stats.counts.get(event) or EventCounts()
    return {
        "total_count": counts.total,
        "unique_persons": sum(1 for bits in stats.persons.values() if bits & _BIT[event]),
        "first_seen": _when(counts.first_seen),
        "last_seen": _when(counts.last_seen),
        "unique_persons_only_seen": 0,
        "total_count_only_seen": 0,
    }


def stats_json(stats: SurveyStats) -> dict[str, Any]:
    """``{"stats": {...}, "rates": {...}}`` as PostHog's ``/surveys/<id>/stats/`` answers."""
    shown, dismissed, sent = (_event_stats(stats, e) for e in EVENTS)
    both = sum(1 for bits in stats.persons.values() if bits & 6 == 6)
    dismissed["unique_persons"] = max(0, dismissed["unique_persons"] - both)
    shown["unique_persons_only_seen"] = max(
        0, shown["unique_persons"] - dismissed["unique_persons"] - sent["unique_persons"]
    )
    shown["total_count_only_seen"] = max(
        0, shown["total_count"] - dismissed["total_count"] - sent["total_count"]
    )
    rates = {
        "response_rate": 0.0,
        "dismissal_rate": 0.0,
        "unique_users_response_rate": 0.0,
        "unique_users_dismissal_rate": 0.0,
    }
    if shown["total_count"] > 0:
        unique_shown = shown["unique_persons"] or 1
        rates = {
            "response_rate": round(sent["total_count"] / shown["total_count"] * 100, 2),
            "dismissal_rate": round(dismissed["total_count"] / shown["total_count"] * 100, 2),
            "unique_users_response_rate": round(sent["unique_persons"] / unique_shown * 100, 2),
            "unique_users_dismissal_rate": round(
                dismissed["unique_persons"] / unique_shown * 100, 2
            ),
        }
    return {"stats": {SHOWN: shown, DISMISSED: dismissed, SENT: sent}, "rates": rates}


def _rating_range(scale: Any) -> list[int]:
    if scale == 10:
        return list(range(0, 11))
    if isinstance(scale, int) and not isinstance(scale, bool) and scale > 0:
        return list(range(1, scale + 1))
    return []


def _merged_counts(stats: SurveyStats, keys: Sequence[str]) -> tuple[dict[str, int], int]:
    counts: dict[str, int] = {}
    answered = 0
    for key in keys:
        for value, n in stats.choices.get(key, {}).items():
            counts[value] = counts.get(value, 0) + n
        answered += stats.answered.get(key, 0)
    return counts, answered


def _open_answers(
    stats: SurveyStats, keys: Sequence[str], choices: set[str], limit: int, offset: int
) -> dict[str, Any]:
    """Answers that are free text (not one of ``choices``), newest first."""
    rows = []
    for submission in stats.submissions.values():
        for key in keys:
            if key not in submission.answers:
                continue
            values = _answer_values(submission.answers[key])
            free = [v for v in values if v not in choices]
            if free:
                rows.append((submission, free))
    rows.sort(key=lambda row: row[0].at, reverse=True)
    page = rows[offset : offset + limit]
    return {
        "count": len(rows),
        "limit": limit,
        "offset": offset,
        "results": [
            {
                "response": free[0] if len(free) == 1 else free,
                "person": sub.person,
                "timestamp": _when(sub.at),
                "iteration": sub.iteration,
            }
            for sub, free in page
        ],
    }


def question_summary(
    stats: SurveyStats,
    question: Mapping[str, Any],
    position: int,
    *,
    limit: int = DEFAULT_PAGE,
    offset: int = 0,
) -> dict[str, Any]:
    """One question's summary; answers known only by position count for the question at that
    position."""
    qid = question.get("id")
    keys = [k for k in (qid, f"{POSITION_KEY}{position}") if isinstance(k, str) and k]
    counts, answered = _merged_counts(stats, keys)
    qtype = question.get("type")
    result: dict[str, Any] = {
        "id": qid,
        "index": position,
        "type": qtype,
        "question": question.get("question"),
        "response_count": answered,
    }
    if qtype == "rating":
        scale = question.get("scale")
        distribution = {str(v): counts.get(str(v), 0) for v in _rating_range(scale)}
        valid = sum(distribution.values())
        total = sum(int(k) * n for k, n in distribution.items())
        result["scale"] = scale
        result["distribution"] = distribution
        result["out_of_range"] = answered - valid
        result["average"] = round(total / valid, 2) if valid else None
        if scale == 10:
            promoters = distribution["9"] + distribution["10"]
            detractors = sum(distribution[str(v)] for v in range(0, 7))
            result["nps"] = round((promoters - detractors) / valid * 100, 2) if valid else None
    elif qtype in ("single_choice", "multiple_choice"):
        choices = [c for c in question.get("choices") or [] if isinstance(c, str)]
        listed = set(choices)
        result["choices"] = {c: counts.get(c, 0) for c in choices}
        open_count = sum(n for v, n in counts.items() if v not in listed)
        result["open_choice_count"] = open_count
        result["open_answers"] = (
            _open_answers(stats, keys, listed, limit, offset)
            if open_count
            else {"count": 0, "limit": limit, "offset": offset, "results": []}
        )
    elif qtype == "open":
        result["open_answers"] = _open_answers(stats, keys, set(), limit, offset)
    return result


def summary(
    stats: SurveyStats,
    questions: Sequence[Mapping[str, Any]],
    *,
    question_id: str | None = None,
    limit: int = DEFAULT_PAGE,
    offset: int = 0,
) -> dict[str, Any]:
    """Per-question summary of the survey's questions (or only ``question_id``'s)."""
    limit = max(1, min(limit, MAX_PAGE))
    offset = max(0, offset)
    rows = [
        question_summary(stats, question, position, limit=limit, offset=offset)
        for position, question in enumerate(questions)
        if question_id is None or question.get("id") == question_id
    ]
    return {"responses": stats.responses, "questions": rows}
