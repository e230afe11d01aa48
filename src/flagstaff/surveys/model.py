"""The survey record, in PostHog's shapes, and the rules applied when one is saved.

A survey keeps PostHog's JSON for its questions, conditions and appearance as given (posthog-js
reads them as they are), so keys this module does not know (translations, validation rules,
new appearance options) survive a round trip. What is computed here, as PostHog's model does
on save: question ids, the iteration schedule of a recurring survey, and its current iteration.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

import msgspec

SurveyType = Literal["popover", "widget", "api", "external_survey"]
SURVEY_TYPES: tuple[str, ...] = get_args(SurveyType)
QUESTION_TYPES = ("open", "link", "rating", "single_choice", "multiple_choice")
CHOICE_QUESTION_TYPES = frozenset({"single_choice", "multiple_choice"})
BRANCHING_TYPES = ("next_question", "end", "response_based", "specific_question")
Schedule = Literal["once", "recurring", "always"]
SCHEDULES: tuple[str, ...] = get_args(Schedule)
RATING_SCALES = (2, 3, 5, 7, 10)
RATING_DISPLAYS = ("number", "emoji")
CONTENT_TYPES = ("text", "html")
MATCH_TYPES = ("regex", "not_regex", "exact", "is_not", "icontains", "not_icontains")
# PostHog caps iterations: users have set huge values by accident.
MAX_ITERATION_COUNT = 500
MAX_NAME_LENGTH = 400
# Fields a create, PUT or PATCH body may set (``targeting_flag_filters`` and
# ``remove_targeting_flag`` act on the targeting flag and are not stored on the survey).
WRITABLE_FIELDS = (
    "name",
    "description",
    "type",
    "schedule",
    "linked_flag_id",
    "questions",
    "conditions",
    "appearance",
    "start_date",
    "end_date",
    "archived",
    "responses_limit",
    "iteration_count",
    "iteration_frequency_days",
    "enable_partial_responses",
)


class Survey(msgspec.Struct, kw_only=True):
    """One survey as stored. Dates are aware UTC datetimes."""

    id: str
    name: str
    type: str
    description: str = ""
    schedule: str | None = "once"
    questions: list[dict[str, Any]] = []
    conditions: dict[str, Any] | None = None
    appearance: dict[str, Any] | None = None
    start_date: datetime | None = None
    end_date: datetime | None = None
    archived: bool = False
    linked_flag_id: int | None = None
    targeting_flag_id: int | None = None
    internal_targeting_flag_id: int | None = None
    responses_limit: int | None = None
    iteration_count: int | None = None
    iteration_frequency_days: int | None = None
    iteration_start_dates: list[datetime] | None = None
    current_iteration: int | None = None
    current_iteration_start_date: datetime | None = None
    enable_partial_responses: bool | None = False
    created_at: datetime | None = None
    updated_at: datetime | None = None


class SurveySave(msgspec.Struct, kw_only=True):
    """A validated save: the survey to store and what the body asked of its targeting flag."""

    survey: Survey
    # None: the body did not mention targeting_flag_filters (or sent null/{}): keep as is.
    targeting_flag_filters: dict[str, Any] | None = None
    remove_targeting_flag: bool = False


def new_survey_id() -> str:
    return str(uuid.uuid4())


def parse_datetime(value: Any) -> datetime | None:
    """An ISO 8601 date or date-time as an aware UTC datetime (naive means UTC); None if not."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def format_datetime(value: datetime | None) -> str | None:
    """PostHog's rendering: ISO 8601 in UTC with a ``Z``."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def assign_question_ids(
    questions: list[dict[str, Any]], previous: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Every question gets an ``id`` (uuid4), kept across edits.

    An id sent with the question is kept (PostHog's rule). A question sent without one takes
    the id of the previous question at the same position when that one had the same type and
    its id is not used elsewhere in the new list, so an edit through a client that drops ids
    keeps the answers attached to their question; otherwise it gets a new uuid.
    """
    used = {q["id"] for q in questions if isinstance(q.get("id"), str) and q["id"]}
    result: list[dict[str, Any]] = []
    for position, question in enumerate(questions):
        if isinstance(question.get("id"), str) and question["id"]:
            result.append(question)
            continue
        inherited = None
        if previous is not None and position < len(previous):
            old = previous[position]
            old_id = old.get("id")
            same_type = old.get("type") == question.get("type")
            if same_type and isinstance(old_id, str) and old_id and old_id not in used:
                inherited = old_id
        question_id = inherited or str(uuid.uuid4())
        used.add(question_id)
        result.append({**question, "id": question_id})
    return result


def is_recurring(survey: Survey) -> bool:
    return bool(survey.iteration_count) and bool(survey.iteration_frequency_days)


def update_iterations(survey: Survey) -> Survey:
    """The iteration schedule, recomputed on every save as PostHog's model does.

    No iterations (count or frequency unset or 0): no schedule, no current iteration. Not
    launched: no start dates yet. Launched: ``min(count, 500)`` start dates ``frequency`` days
    apart from ``start_date``, and iteration 1 when none was current.
    """
    if not is_recurring(survey):
        return msgspec.structs.replace(
            survey,
            iteration_start_dates=[],
            current_iteration=None,
            current_iteration_start_date=None,
        )
    if survey.start_date is None:
        return msgspec.structs.replace(survey, iteration_start_dates=None)
    count = min(survey.iteration_count or 0, MAX_ITERATION_COUNT)
    step = timedelta(days=survey.iteration_frequency_days or 0)
    dates = [survey.start_date + step * k for k in range(count)]
    current = survey.current_iteration
    current_start = survey.current_iteration_start_date
    if not current:
        current, current_start = 1, survey.start_date
    return msgspec.structs.replace(
        survey,
        iteration_start_dates=dates,
        current_iteration=current,
        current_iteration_start_date=current_start,
    )


def iteration_at(survey: Survey, now: datetime) -> tuple[int, datetime] | None:
    """The (1-based iteration, its start) running at ``now``, as PostHog's daily task finds it:
    the first start date from which ``now`` is 0..frequency days on. None when the survey is
    not recurring, has ended, or ``now`` falls in no iteration."""
    if not survey.iteration_start_dates or survey.end_date is not None:
        return None
    frequency = survey.iteration_frequency_days
    if not frequency:
        return None
    today = now.astimezone(UTC).date()
    for index, start in enumerate(survey.iteration_start_dates, start=1):
        if 0 <= (today - start.astimezone(UTC).date()).days <= frequency:
            return index, start
    return None


def advance_iteration(survey: Survey, now: datetime) -> Survey:
    """The survey with the iteration running at ``now`` as its current one (unchanged when
    none runs). A store calls this before serving or daily, and saves when it changed: the
    internal targeting flag follows the current iteration (see ``surveys.flags``)."""
    found = iteration_at(survey, now)
    if found is None or found[0] == survey.current_iteration:
        return survey
    return msgspec.structs.replace(
        survey, current_iteration=found[0], current_iteration_start_date=found[1]
    )


def has_started(survey: Survey, now: datetime) -> bool:
    return survey.start_date is not None and survey.start_date <= now


def has_ended(survey: Survey, now: datetime) -> bool:
    return survey.end_date is not None and survey.end_date <= now


def is_launched(survey: Survey, now: datetime) -> bool:
    """Launched and not stopped: the state in which its flags are active."""
    return has_started(survey, now) and not has_ended(survey, now) and not survey.archived


def limit_reached(survey: Survey, responses: int) -> bool:
    return survey.responses_limit is not None and responses >= survey.responses_limit


def is_active(survey: Survey, now: datetime, responses: int = 0) -> bool:
    """Shown to posthog-js: started, not ended, not archived, responses_limit not reached.

    ``responses`` is the number of ``survey sent`` events counted for it (see
    ``surveys.stats``).
    """
    return is_launched(survey, now) and not limit_reached(survey, responses)
