"""Validation of survey bodies for the management API, with PostHog's rules.

Errors are ``(field path, message)`` pairs, as ``flags.validation`` reports them, e.g.
``("questions[1].choices", "Must be a non-empty list of non-empty strings.")``; the HTTP layer
answers them as one 400 JSON body (``attr`` is the first path, ``detail`` lists them all).
``survey_from_input`` turns a create, PUT or PATCH body (its fields decoded to their types by
the application's ``SurveyInput``) into the survey to store.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

import msgspec

from flagstaff.common.invalid import DefinitionInvalid, Errors
from flagstaff.common.json_types import is_int, is_number
from flagstaff.flags.validation import validate_flag
from flagstaff.surveys import model
from flagstaff.surveys.model import Survey, SurveySave

LINK_SCHEMES = ("https", "mailto")
_EMAIL_LINK = re.compile(r"^mailto:[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$")
RATING_BUCKETS = {
    2: ("negative", "positive"),
    3: ("negative", "neutral", "positive"),
    5: ("negative", "neutral", "positive"),
    7: ("negative", "neutral", "positive"),
    10: ("detractors", "passives", "promoters"),
}
FULL_ROLLOUT_MESSAGE = (
    "Invalid operation: User targeting rolls out to everyone. If you want to roll out to "
    "everyone, delete this targeting"
)
EXTERNAL_ONLY_FORBIDDEN = ("linked_flag_id", "targeting_flag_filters")
EXTERNAL_FORBIDDEN_CONDITIONS = (
    "url",
    "urlMatchType",
    "selector",
    "seenSurveyWaitPeriodInDays",
    "linkedFlagVariant",
    "deviceTypes",
    "deviceTypesMatchType",
)


class SurveyInvalid(DefinitionInvalid):
    """A survey body that cannot be saved."""


@dataclass(frozen=True)
class LinkedFlag:
    """What validation needs of the flag a survey links to (the store looks it up by id)."""

    id: int
    key: str
    variants: tuple[str, ...] = ()


@dataclass(frozen=True)
class SurveyContext:
    """What a save is checked against, looked up by the caller.

    ``linked_flag``: the flag of the body's ``linked_flag_id`` (or, on PATCH without one, of
    the current survey's), None when there is none or it does not exist. ``other_names``: the
    names of the project's other surveys (names are unique per project).
    """

    linked_flag: LinkedFlag | None = None
    other_names: frozenset[str] = field(default_factory=frozenset)


def _check_string(path: str, value: Any, errors: Errors, *, nullable: bool = True) -> None:
    if value is None:
        if not nullable:
            errors.append((path, "This field may not be null."))
    elif not isinstance(value, str):
        errors.append((path, "Must be a string."))


def _check_bool(path: str, value: Any, errors: Errors) -> None:
    if value is not None and not isinstance(value, bool):
        errors.append((path, "Must be a boolean."))


def _check_link(path: str, link: Any, errors: Errors) -> None:
    if link is None or link == "":
        return
    if not isinstance(link, str):
        errors.append((path, "Must be a string."))
        return
    parsed = urlparse(link)
    if parsed.scheme not in LINK_SCHEMES:
        errors.append((path, "Link must be a URL with one of these schemes: [https, mailto]"))
    elif parsed.scheme == "mailto" and not _EMAIL_LINK.match(link):
        errors.append(
            (
                path,
                "Invalid mailto link. Please enter a valid mailto link "
                "(e.g., mailto:example@domain.com).",
            )
        )
    elif parsed.scheme == "https" and not parsed.netloc:
        errors.append((path, "Invalid HTTPS URL. Please enter a valid HTTPS link."))


def _check_next_step(path: str, value: Any, count: int, errors: Errors) -> None:
    if value == "end":
        return
    if not is_int(value) or not 0 <= value < count:
        errors.append((path, f"Must be a question index (0 to {count - 1}) or 'end'."))


def _check_branching(
    path: str, question: dict[str, Any], position: int, count: int, errors: Errors
) -> None:
    branching = question.get("branching")
    if branching is None:
        return
    if not isinstance(branching, dict):
        errors.append((path, "Must be an object."))
        return
    kind = branching.get("type")
    if kind not in model.BRANCHING_TYPES:
        errors.append((f"{path}.type", f"Must be one of {', '.join(model.BRANCHING_TYPES)}."))
        return
    if kind == "specific_question":
        index = branching.get("index")
        if not is_int(index) or not 0 <= index < count:
            errors.append((f"{path}.index", f"Must be a question index (0 to {count - 1})."))
        elif index == position:
            errors.append((f"{path}.index", "A question cannot branch to itself."))
    elif kind == "response_based":
        values = branching.get("responseValues")
        qtype = question.get("type")
        if qtype not in ("single_choice", "rating"):
            errors.append(
                (
                    f"{path}.type",
                    "Response-based branching needs a rating or single choice question.",
                )
            )
            return
        if not isinstance(values, dict):
            errors.append((f"{path}.responseValues", "Must be an object."))
            return
        if qtype == "single_choice":
            choices = question.get("choices")
            allowed = {str(i) for i in range(len(choices))} if isinstance(choices, list) else set()
        else:
            scale: Any = question.get("scale")
            allowed = set(RATING_BUCKETS.get(scale, ()))
        for key, step in values.items():
            step_path = f"{path}.responseValues.{key}"
            if str(key) not in allowed:
                errors.append((step_path, "Not a choice index or rating bucket of this question."))
            else:
                _check_next_step(step_path, step, count, errors)


def _check_question(path: str, question: Any, position: int, count: int, errors: Errors) -> None:
    if not isinstance(question, dict):
        errors.append((path, "Must be an object."))
        return
    qtype = question.get("type")
    if qtype not in model.QUESTION_TYPES:
        errors.append((f"{path}.type", f"Must be one of {', '.join(model.QUESTION_TYPES)}."))
    text = question.get("question")
    if not isinstance(text, str) or not text.strip():
        errors.append((f"{path}.question", "Question text is required"))
    qid = question.get("id")
    if qid is not None and (not isinstance(qid, str) or not qid):
        errors.append((f"{path}.id", "Must be a non-empty string."))
    _check_string(f"{path}.description", question.get("description"), errors)
    content_type = question.get("descriptionContentType")
    if content_type is not None and content_type not in model.CONTENT_TYPES:
        errors.append(
            (
                f"{path}.descriptionContentType",
                "Question descriptionContentType must be one of ['text', 'html']",
            )
        )
    _check_string(f"{path}.buttonText", question.get("buttonText"), errors)
    for flag in ("optional", "hasOpenChoice", "shuffleOptions", "skipSubmitButton"):
        _check_bool(f"{path}.{flag}", question.get(flag), errors)
    if qtype in model.CHOICE_QUESTION_TYPES:
        choices = question.get("choices")
        if (
            not isinstance(choices, list)
            or not choices
            or not all(isinstance(c, str) and c.strip() for c in choices)
        ):
            errors.append((f"{path}.choices", "Must be a non-empty list of non-empty strings."))
        elif len(set(choices)) != len(choices):
            errors.append((f"{path}.choices", "Choices must be unique."))
    if qtype == "rating":
        scale = question.get("scale")
        if scale not in model.RATING_SCALES or not is_int(scale):
            errors.append((f"{path}.scale", "Must be one of 2, 3, 5, 7, 10."))
        display = question.get("display", "number")
        if display not in model.RATING_DISPLAYS:
            errors.append((f"{path}.display", "Must be number or emoji."))
        elif display == "emoji" and scale not in (2, 3, 5):
            errors.append((f"{path}.display", "Emoji ratings have a scale of 2, 3 or 5."))
        for label in ("lowerBoundLabel", "upperBoundLabel"):
            _check_string(f"{path}.{label}", question.get(label), errors)
    if qtype == "link":
        _check_link(f"{path}.link", question.get("link"), errors)
    _check_branching(f"{path}.branching", question, position, count, errors)


def check_questions(questions: Any, errors: Errors) -> None:
    if not isinstance(questions, list):
        errors.append(("questions", "Questions must be a list of objects"))
        return
    for position, question in enumerate(questions):
        _check_question(f"questions[{position}]", question, position, len(questions), errors)
    ids = [q.get("id") for q in questions if isinstance(q, dict) and q.get("id")]
    if len(ids) != len(set(ids)):
        errors.append(("questions", "Question ids must be unique."))


def _check_events(path: str, value: Any, errors: Errors) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not isinstance(value.get("values", []), list):
        errors.append((path, "Must be an object with a list of values."))
        return
    _check_bool(f"{path}.repeatedActivation", value.get("repeatedActivation"), errors)
    for position, event in enumerate(value.get("values") or []):
        event_path = f"{path}.values[{position}]"
        if (
            not isinstance(event, dict)
            or not isinstance(event.get("name"), str)
            or not event["name"]
        ):
            errors.append((event_path, "Must be an object with an event name."))
            continue
        filters = event.get("propertyFilters")
        if filters is not None and not isinstance(filters, dict):
            errors.append((f"{event_path}.propertyFilters", "Must be an object."))


def check_conditions(
    conditions: Any, linked_flag: LinkedFlag | None, has_linked_flag: bool, errors: Errors
) -> None:
    if conditions is None:
        return
    if not isinstance(conditions, dict):
        errors.append(("conditions", "Conditions must be an object"))
        return
    _check_string("conditions.url", conditions.get("url"), errors)
    _check_string("conditions.selector", conditions.get("selector"), errors)
    for name in ("urlMatchType", "deviceTypesMatchType"):
        match_type = conditions.get(name)
        if match_type is not None and match_type not in model.MATCH_TYPES:
            errors.append((f"conditions.{name}", f"Must be one of {', '.join(model.MATCH_TYPES)}."))
    wait = conditions.get("seenSurveyWaitPeriodInDays")
    if wait is not None and (not is_number(wait) or wait < 0):
        errors.append(
            ("conditions.seenSurveyWaitPeriodInDays", "Must be a number of days, 0 or more.")
        )
    devices = conditions.get("deviceTypes")
    if devices is not None and (
        not isinstance(devices, list) or not all(isinstance(d, str) for d in devices)
    ):
        errors.append(("conditions.deviceTypes", "Must be a list of strings."))
    _check_events("conditions.events", conditions.get("events"), errors)
    _check_events("conditions.cancelEvents", conditions.get("cancelEvents"), errors)
    actions = conditions.get("actions")
    if actions is not None and (
        not isinstance(actions, dict) or not isinstance(actions.get("values", []), list)
    ):
        errors.append(("conditions.actions", "Must be an object with a list of values."))
    variant = conditions.get("linkedFlagVariant")
    if variant is None or variant == "":
        return
    if not isinstance(variant, str):
        errors.append(("conditions.linkedFlagVariant", "Must be a string."))
    elif not has_linked_flag:
        errors.append(
            (
                "conditions.linkedFlagVariant",
                "linkedFlagVariant can only be used when a linked_flag_id is specified",
            )
        )
    elif linked_flag is not None and variant != "any" and variant not in linked_flag.variants:
        if linked_flag.variants:
            message = (
                f"Feature flag variant '{variant}' does not exist. Available variants: "
                f"{', '.join(linked_flag.variants)}"
            )
        else:
            message = (
                f"Feature flag variant '{variant}' specified but the linked feature flag has "
                "no variants"
            )
        errors.append(("conditions.linkedFlagVariant", message))


def check_appearance(appearance: Any, errors: Errors) -> None:
    if appearance is None:
        return
    if not isinstance(appearance, dict):
        errors.append(("appearance", "Appearance must be an object"))
        return
    content_type = appearance.get("thankYouMessageDescriptionContentType")
    if content_type is not None and content_type not in model.CONTENT_TYPES:
        errors.append(
            (
                "appearance.thankYouMessageDescriptionContentType",
                "thankYouMessageDescriptionContentType must be one of ['text', 'html']",
            )
        )
    delay = appearance.get("surveyPopupDelaySeconds")
    if delay is not None and (not is_number(delay) or delay < 0):
        errors.append(
            (
                "appearance.surveyPopupDelaySeconds",
                "Survey popup delay seconds must be a positive integer",
            )
        )
    _check_bool("appearance.whiteLabel", appearance.get("whiteLabel"), errors)


def check_targeting_filters(filters: Any, errors: Errors) -> None:
    """The filters of the targeting flag: the flag filter language, and not everyone."""
    if filters is None:
        return
    if not isinstance(filters, dict):
        errors.append(("targeting_flag_filters", "Must be an object."))
        return
    for path, message in validate_flag({"key": "survey-targeting", "filters": filters}):
        errors.append((path.replace("filters", "targeting_flag_filters", 1), message))
    groups = filters.get("groups") or []
    if isinstance(groups, list) and any(
        isinstance(group, dict)
        and group.get("rollout_percentage") in (100, None)
        and not group.get("properties")
        for group in groups
    ):
        errors.append(("targeting_flag_filters", FULL_ROLLOUT_MESSAGE))


def _check_dates(body: Mapping[str, Any], errors: Errors) -> dict[str, datetime | None]:
    parsed: dict[str, datetime | None] = {}
    for name in ("start_date", "end_date"):
        if name not in body:
            continue
        value = body[name]
        if value is None:
            parsed[name] = None
            continue
        when = model.parse_datetime(value)
        if when is None:
            errors.append(
                (name, "Must be an ISO 8601 date-time (e.g. 2024-01-01T00:00:00Z) or null.")
            )
        else:
            parsed[name] = when
    return parsed


def _check_counts(survey: Survey, current: Survey | None, errors: Errors) -> None:
    limit = survey.responses_limit
    if limit is not None and limit < 1:
        errors.append(("responses_limit", "Must be a positive integer or null."))
    count = survey.iteration_count
    frequency = survey.iteration_frequency_days
    if count is not None and not 0 <= count <= model.MAX_ITERATION_COUNT:
        errors.append(
            ("iteration_count", f"Must be an integer from 0 to {model.MAX_ITERATION_COUNT}.")
        )
        return
    if frequency is not None and frequency < 0:
        errors.append(("iteration_frequency_days", "Must be a positive integer or null."))
        return
    if count and not frequency:
        errors.append(
            ("iteration_frequency_days", "Is required when iteration_count is more than 0.")
        )
    if (
        current is not None
        and current.current_iteration is not None
        and count is not None
        and current.current_iteration > count > 0
    ):
        errors.append(
            (
                "iteration_count",
                f"Cannot change survey recurrence to {count}, should be at least "
                f"{current.current_iteration}",
            )
        )


def _check_external(body: Mapping[str, Any], survey: Survey, errors: Errors) -> None:
    for name in EXTERNAL_ONLY_FORBIDDEN:
        if body.get(name) is not None:
            errors.append((name, f"{name} is not allowed for external surveys"))
    conditions = survey.conditions or {}
    forbidden = [n for n in EXTERNAL_FORBIDDEN_CONDITIONS if conditions.get(n) is not None]
    forbidden += [
        n
        for n in ("actions", "events")
        if isinstance(conditions.get(n), dict) and conditions[n].get("values")
    ]
    if forbidden:
        errors.append(
            (
                "conditions",
                "The following condition fields are not allowed for external surveys: "
                + ", ".join(forbidden),
            )
        )
    if (survey.appearance or {}).get("surveyPopupDelaySeconds") is not None:
        errors.append(("appearance", "surveyPopupDelaySeconds is not allowed for external surveys"))


def survey_from_input(
    body: Mapping[str, Any],
    current: Survey | None,
    *,
    now: datetime,
    context: SurveyContext | None = None,
    partial: bool = True,
    new_id: str | None = None,
) -> SurveySave:
    """The survey a create (``current`` None), PUT (``partial`` False) or PATCH body asks for.

    ``body`` holds the fields the request set, each of its type already (the application's
    ``SurveyInput`` decodes them); what is checked here is what a type cannot say: required
    fields, names, questions, conditions, appearance, dates, counts and the flags looked up.
    Raises ``SurveyInvalid`` with every problem found.
    """
    context = context or SurveyContext()
    errors: Errors = []
    creating = current is None
    if creating or not partial:
        for field in ("name", "type"):
            if body.get(field) in (None, ""):
                errors.append((field, "This field is required."))
    name = body.get("name")
    if name is not None and not ((creating or not partial) and name == ""):
        if not name.strip():
            errors.append(("name", "Must be a non-empty string."))
        elif len(name) > model.MAX_NAME_LENGTH:
            errors.append(
                ("name", f"Ensure this field has no more than {model.MAX_NAME_LENGTH} characters.")
            )
        elif name in context.other_names:
            errors.append(("name", "There is already a survey with this name."))
    if "questions" in body:
        check_questions(body["questions"], errors)
    # A PATCH keeps what it does not mention; a create or PUT starts from nothing.
    kept = current if current is not None and partial else None
    linked_id = body.get("linked_flag_id", kept.linked_flag_id if kept else None)
    if linked_id is not None and (
        context.linked_flag is None or context.linked_flag.id != linked_id
    ):
        errors.append(("linked_flag_id", "Feature Flag with this ID does not exist"))
    conditions = body.get("conditions", kept.conditions if kept else None)
    if "conditions" in body or "linked_flag_id" in body:
        check_conditions(conditions, context.linked_flag, linked_id is not None, errors)
    if "appearance" in body:
        check_appearance(body["appearance"], errors)
    targeting = body.get("targeting_flag_filters")
    check_targeting_filters(targeting, errors)
    dates = _check_dates(body, errors)
    if errors:
        raise SurveyInvalid(errors)

    base = (
        current
        if current is not None and partial
        else Survey(
            id=current.id if current else (new_id or model.new_survey_id()), name="", type="popover"
        )
    )
    changes: dict[str, Any] = {k: body[k] for k in model.WRITABLE_FIELDS if k in body}
    changes.update(dates)
    if changes.get("description") is None and "description" in changes:
        changes["description"] = ""
    if changes.get("questions") is None and "questions" in changes:
        changes["questions"] = []
    if "archived" in changes and changes["archived"] is None:
        changes["archived"] = False
    if "questions" in changes:
        changes["questions"] = model.assign_question_ids(
            [dict(q) for q in changes["questions"]], current.questions if current else None
        )
    if current is not None and not partial:
        for kept_field in ("created_at", "targeting_flag_id", "internal_targeting_flag_id"):
            changes.setdefault(kept_field, getattr(current, kept_field))
        if current.current_iteration is not None:
            changes.setdefault("current_iteration", current.current_iteration)
            changes.setdefault("current_iteration_start_date", current.current_iteration_start_date)
    changes["updated_at"] = now
    if creating:
        changes["created_at"] = now
    survey = msgspec.structs.replace(base, **changes)
    late: Errors = []
    _check_counts(survey, current, late)
    if survey.start_date and survey.end_date and survey.end_date < survey.start_date:
        late.append(("end_date", "Must not be before start_date."))
    if survey.type == "external_survey":
        _check_external(body, survey, late)
    if late:
        raise SurveyInvalid(late)
    survey = model.update_iterations(survey)
    return SurveySave(
        survey=survey,
        targeting_flag_filters=targeting or None,
        remove_targeting_flag=body.get("remove_targeting_flag") is True,
    )
