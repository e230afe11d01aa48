"""Surveys: create, update (PATCH or PUT), archive, delete, their counts and answers, and the
move of recurring surveys to the iteration running now.

A save decodes the body once (:class:`SurveyInput`, the request body the OpenAPI document
shows too), checks what a type cannot say (``surveys.validation``, against the linked flag
and the project's other names, looked up here), plans the changes to the flags the survey
maintains (``surveys.flags``), turns each into a whole flag as the flag API would
(:func:`flagstaff.application.flags.flag_from_input`), and hands all of it to the store, which
applies it in one transaction.

The use cases answer typed records (:class:`ShownSurvey`, :class:`SurveyPage`,
:class:`SurveyCounts`, :class:`AllSurveyCounts`, :class:`SurveyAnswers`); the adapters render
them with the functions here (:func:`survey_json`, :func:`survey_stats_json`,
:func:`all_survey_stats_json`, :func:`survey_summary_json`), the one definition of each wire
shape. The management API and the console read surveys through the same functions
(:func:`shown_survey`, :func:`find_survey`), so both show one shape."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

from flagstaff.activity.records import ChangeSource
from flagstaff.application import flags as flag_rules
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, existing, invalid_input
from flagstaff.application.inputs import UNSET, UnsetType, given
from flagstaff.flags.records import FeatureFlag
from flagstaff.store.records import Conflict, FlagWrite, Page
from flagstaff.surveys import flags as survey_flags
from flagstaff.surveys import stats
from flagstaff.surveys.management import survey_json as survey_shape
from flagstaff.surveys.model import Schedule, Survey, SurveyType, advance_iteration, format_datetime
from flagstaff.surveys.validation import LinkedFlag, SurveyContext, SurveyInvalid, survey_from_input

__all__ = [
    "AllSurveyCounts",
    "FlagStore",
    "ShownSurvey",
    "SurveyAnswers",
    "SurveyCounts",
    "SurveyInput",
    "SurveyPage",
    "SurveyReads",
    "SurveyStore",
    "advance_iterations",
    "all_survey_stats",
    "all_survey_stats_json",
    "archive_survey",
    "create_survey",
    "delete_survey",
    "find_survey",
    "flags_shown",
    "list_surveys",
    "minimal_flag",
    "record_id",
    "shown_survey",
    "stored_flag",
    "survey_aggregates",
    "survey_json",
    "survey_of",
    "survey_stats",
    "survey_stats_json",
    "survey_summary",
    "survey_summary_json",
    "surveys_page",
    "update_survey",
]

_ROLE_FIELD = {
    "targeting": "targeting_flag_id",
    "internal_targeting": "internal_targeting_flag_id",
}


class SurveyInput(msgspec.Struct, kw_only=True):
    """A survey to create or replace (PUT), or the fields to change (PATCH: a field left out
    is kept). Questions, conditions and appearance are PostHog's JSON objects, kept as sent
    and checked field by field (``surveys.validation``). Other fields are ignored."""

    name: str | UnsetType = UNSET
    type: SurveyType | UnsetType = UNSET
    description: str | UnsetType | None = UNSET
    schedule: Schedule | UnsetType | None = UNSET
    questions: list[dict[str, Any]] | UnsetType | None = UNSET
    conditions: dict[str, Any] | UnsetType | None = UNSET
    appearance: dict[str, Any] | UnsetType | None = UNSET
    start_date: str | UnsetType | None = UNSET
    """ISO 8601 (a date alone is midnight UTC); null: not launched."""
    end_date: str | UnsetType | None = UNSET
    archived: bool | UnsetType | None = UNSET
    linked_flag_id: int | UnsetType | None = UNSET
    targeting_flag_filters: dict[str, Any] | UnsetType | None = UNSET
    """The filters of the targeting flag the survey maintains (created when it has none)."""
    remove_targeting_flag: bool | UnsetType | None = UNSET
    """True: delete the survey's targeting flag."""
    responses_limit: int | UnsetType | None = UNSET
    iteration_count: int | UnsetType | None = UNSET
    iteration_frequency_days: int | UnsetType | None = UNSET
    enable_partial_responses: bool | UnsetType | None = UNSET


class ShownSurvey(msgspec.Struct, frozen=True):
    """A survey with the flags it shows (its linked, targeting and internal targeting flags
    that exist, minimal, by id): what the management API answers of one survey."""

    survey: Survey
    flags: dict[int, FeatureFlag]


class SurveyPage(msgspec.Struct, frozen=True):
    """A page of the project's surveys: how many in all, and the page's."""

    count: int
    results: list[ShownSurvey]


class SurveyCounts(msgspec.Struct, frozen=True):
    """A survey's event counts (``/surveys/<id>/stats/``)."""

    survey: Survey
    aggregate: stats.SurveyStats


class AllSurveyCounts(msgspec.Struct, frozen=True):
    """The event counts of every survey of the project together (``/surveys/stats/``)."""

    aggregate: stats.SurveyStats
    survey_count: int


class SurveyAnswers(msgspec.Struct, frozen=True):
    """A survey's answers (``/surveys/<id>/summary/``): its counts and which question and page
    of open answers were asked for."""

    survey: Survey
    aggregate: stats.SurveyStats
    question_id: str | None = None
    limit: int = stats.DEFAULT_PAGE
    offset: int = 0


class FlagStore(Protocol):
    """What reading the flags a survey or feature shows needs."""

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None: ...


class SurveyReads(Protocol):
    """The project's surveys and their answers' aggregates, as they are."""

    async def list_surveys(self, project_id: int, limit: int, offset: int) -> Page: ...

    async def get_survey(self, project_id: int, survey_id: str) -> Survey | None: ...

    async def survey_aggregates(
        self, project_id: int, survey_ids: list[str] | None
    ) -> dict[str, stats.SurveyStats]: ...


class SurveyStore(FlagStore, SurveyReads, Protocol):
    """What the survey use cases need of the store."""

    async def survey_names(self, project_id: int) -> set[str]: ...

    async def save_survey(
        self,
        project_id: int,
        survey: Survey,
        flags: list[FlagWrite],
        *,
        create: bool,
        source: ChangeSource | None = None,
    ) -> Survey: ...

    async def delete_survey(
        self,
        project_id: int,
        survey_id: str,
        flags: list[FlagWrite],
        *,
        source: ChangeSource | None = None,
    ) -> None: ...


def _now() -> datetime:
    return datetime.now(UTC)


# the flags a survey or feature shows ----------------------------------------------------------


def minimal_flag(flag: FeatureFlag) -> dict[str, Any]:
    """The flag as a survey or feature shows it (PostHog's ``MinimalFeatureFlagSerializer``)."""
    return {
        "id": flag.id,
        "key": flag.key,
        "name": flag.name,
        "filters": flag.filters,
        "active": flag.active,
        "deleted": flag.deleted,
        "ensure_experience_continuity": flag.ensure_experience_continuity,
    }


async def stored_flag(store: FlagStore, project_id: int, flag_id: int | None) -> FeatureFlag | None:
    """Flag ``flag_id`` as stored, None when there is none or it is deleted."""
    if flag_id is None:
        return None
    flag = await store.get_flag(project_id, flag_id)
    return None if flag is None or flag.deleted else flag


async def flags_shown(
    store: FlagStore, project_id: int, ids: list[int | None]
) -> dict[int, FeatureFlag]:
    """The flags of ``ids`` that exist, by id."""
    found: dict[int, FeatureFlag] = {}
    for flag_id in ids:
        if flag_id is not None and flag_id not in found:
            flag = await stored_flag(store, project_id, flag_id)
            if flag is not None:
                found[flag_id] = flag
    return found


def record_id(raw: str, what: str) -> str:
    """A survey or feature id as they are made, a uuid; anything else (such as text PostgreSQL
    cannot hold) names nothing: a 404."""
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise ApiError(404, "not_found", f"no such {what}") from None


# reading -----------------------------------------------------------------------------------


async def shown_survey(store: FlagStore, project_id: int, survey: Survey) -> ShownSurvey:
    """The survey with the flags it shows."""
    ids = [survey.linked_flag_id, survey.targeting_flag_id, survey.internal_targeting_flag_id]
    return ShownSurvey(survey, await flags_shown(store, project_id, ids))


def survey_json(shown: ShownSurvey) -> dict[str, Any]:
    """The survey in the management API's shape, with its flags."""
    flags = {flag_id: minimal_flag(flag) for flag_id, flag in shown.flags.items()}
    return survey_shape(shown.survey, flags)


async def find_survey(store: SurveyReads, project_id: int, survey_id: str) -> Survey:
    """Survey ``survey_id`` of the project, or a 404."""
    return existing(await store.get_survey(project_id, record_id(survey_id, "survey")), "survey")


async def surveys_page(store: SurveyReads, project_id: int, limit: int, offset: int) -> Page:
    """A page of the project's surveys (:class:`Survey` records), newest first."""
    return await store.list_surveys(project_id, limit, offset)


async def survey_aggregates(
    store: SurveyReads, project_id: int, survey_ids: list[str] | None
) -> dict[str, stats.SurveyStats]:
    """The answers' aggregates of these surveys (None: all the project's), by survey id."""
    return await store.survey_aggregates(project_id, survey_ids)


async def survey_of(caller: Caller[SurveyStore], survey_id: str) -> ShownSurvey:
    """Survey ``survey_id`` with its flags, or a 404."""
    survey = await find_survey(caller.store, caller.project_id, survey_id)
    return await shown_survey(caller.store, caller.project_id, survey)


async def list_surveys(caller: Caller[SurveyStore], limit: int, offset: int) -> SurveyPage:
    """A page of the project's surveys, newest first, with their flags."""
    page = await surveys_page(caller.store, caller.project_id, limit, offset)
    shown = [await shown_survey(caller.store, caller.project_id, s) for s in page.results]
    return SurveyPage(page.count, shown)


# saving ------------------------------------------------------------------------------------


def _flag_writes(
    changes: list[survey_flags.FlagChange], current: dict[int, FeatureFlag]
) -> list[FlagWrite]:
    """Each planned change as a whole flag, checked as the flag API checks it."""
    writes = []
    for change in changes:
        if change.action == "create":
            flag = flag_rules.flag_from_input(change.flag)
            writes.append(FlagWrite(flag=flag, target=_ROLE_FIELD[change.role]))
        else:
            assert change.flag_id is not None
            before = current[change.flag_id]
            body = {"deleted": True} if change.action == "delete" else change.flag or {}
            flag = flag_rules.flag_from_input(body, before)
            write = FlagWrite(flag=flag, flag_id=change.flag_id, version=before.version)
            writes.append(write)
    return writes


async def _save(
    store: SurveyStore,
    project_id: int,
    survey: Survey,
    *,
    create: bool,
    targeting_flag_filters: dict[str, Any] | None = None,
    remove_targeting_flag: bool = False,
    source: ChangeSource | None = None,
) -> Survey:
    """Store ``survey`` with the flag changes it needs (logged as ``source``'s), in one
    transaction."""
    targeting = await stored_flag(store, project_id, survey.targeting_flag_id)
    internal = await stored_flag(store, project_id, survey.internal_targeting_flag_id)
    if targeting is None:
        survey = msgspec.structs.replace(survey, targeting_flag_id=None)
    if internal is None:
        survey = msgspec.structs.replace(survey, internal_targeting_flag_id=None)
    changes = survey_flags.plan_save(
        survey,
        now=_now(),
        targeting_flag=targeting,
        internal_flag=internal,
        targeting_flag_filters=targeting_flag_filters,
        remove_targeting_flag=remove_targeting_flag,
    )
    current = {f.id: f for f in (targeting, internal) if f is not None}
    writes = _flag_writes(changes, current)
    if remove_targeting_flag and targeting is not None:
        survey = msgspec.structs.replace(survey, targeting_flag_id=None)
    try:
        return await store.save_survey(project_id, survey, writes, create=create, source=source)
    except Conflict as exc:
        if exc.field == "key":
            # a generated flag key taken by a flag of the user's: PostHog answers on name
            raise ApiError(400, "invalid_input", exc.message, "name") from None
        raise ApiError(400, "unique", exc.message, exc.field) from None


async def _context(
    store: SurveyStore, project_id: int, fields: dict[str, Any], current: Survey | None
) -> SurveyContext:
    """What the body is checked against: the flag it links (or the survey links) and the names
    of the project's other surveys."""
    linked_id = fields.get("linked_flag_id", current.linked_flag_id if current else None)
    linked = None
    flag = await stored_flag(store, project_id, linked_id)
    if flag is not None:
        variants = flag.filters.get("multivariate") or {}
        linked = LinkedFlag(
            id=flag.id,
            key=flag.key,
            variants=tuple(v["key"] for v in variants.get("variants") or [] if isinstance(v, dict)),
        )
    names = await store.survey_names(project_id)
    if current is not None:
        names = {n for n in names if n != current.name}
    return SurveyContext(linked_flag=linked, other_names=frozenset(names))


async def _write(
    caller: Caller[SurveyStore], current: Survey | None, inp: SurveyInput, *, partial: bool
) -> ShownSurvey:
    store, project_id = caller.store, caller.project_id
    fields = given(inp)
    try:
        checked = survey_from_input(
            fields,
            current,
            now=_now(),
            context=await _context(store, project_id, fields, current),
            partial=partial,
        )
    except SurveyInvalid as exc:
        raise invalid_input(exc) from None
    saved = await _save(
        store,
        project_id,
        checked.survey,
        create=current is None,
        targeting_flag_filters=checked.targeting_flag_filters,
        remove_targeting_flag=checked.remove_targeting_flag,
        source=caller.source,
    )
    return await shown_survey(store, project_id, saved)


async def create_survey(caller: Caller[SurveyStore], inp: SurveyInput) -> ShownSurvey:
    """A new survey and its targeting flags; the survey saved, with its flags."""
    return await _write(caller, None, inp, partial=False)


async def update_survey(
    caller: Caller[SurveyStore], survey_id: str, inp: SurveyInput, *, partial: bool
) -> ShownSurvey:
    """PATCH (``partial``: what the body leaves out is kept) or PUT (replaced)."""
    current = await find_survey(caller.store, caller.project_id, survey_id)
    return await _write(caller, current, inp, partial=partial)


async def archive_survey(caller: Caller[SurveyStore], survey_id: str) -> ShownSurvey:
    """Archived: no longer served, its flags inactive (a PATCH of ``archived``)."""
    return await update_survey(caller, survey_id, SurveyInput(archived=True), partial=True)


async def delete_survey(caller: Caller[SurveyStore], survey_id: str) -> None:
    """The survey, its counts and its targeting flags go (its linked flag stays)."""
    store, project_id = caller.store, caller.project_id
    survey = await find_survey(store, project_id, survey_id)
    current = {}
    for flag_id in (survey.targeting_flag_id, survey.internal_targeting_flag_id):
        flag = await stored_flag(store, project_id, flag_id)
        if flag is not None:
            current[flag.id] = flag
    changes = [c for c in survey_flags.plan_delete(survey) if c.flag_id in current]
    await store.delete_survey(
        project_id, survey.id, _flag_writes(changes, current), source=caller.source
    )


async def advance_iterations(
    store: SurveyStore, project_id: int, surveys: list[Survey], now: datetime | None = None
) -> bool:
    """Move recurring surveys to the iteration running now (their internal flag follows);
    True when one moved. Run before the public list is served."""
    moved = False
    now = now or _now()
    for survey in surveys:
        advanced = advance_iteration(survey, now)
        if advanced is not survey:
            await _save(store, project_id, advanced, create=False)
            moved = True
    return moved


# counts and answers -----------------------------------------------------------------------


async def survey_stats(caller: Caller[SurveyStore], survey_id: str) -> SurveyCounts:
    """The survey's event counts."""
    survey = await find_survey(caller.store, caller.project_id, survey_id)
    aggregates = await survey_aggregates(caller.store, caller.project_id, [survey.id])
    return SurveyCounts(survey, aggregates.get(survey.id) or stats.SurveyStats())


def survey_stats_json(counts: SurveyCounts) -> dict[str, Any]:
    """The survey's event counts and rates (PostHog's shape)."""
    survey = counts.survey
    return {
        **stats.stats_json(counts.aggregate),
        "survey_id": survey.id,
        "start_date": format_datetime(survey.start_date),
        "end_date": format_datetime(survey.end_date),
    }


async def all_survey_stats(caller: Caller[SurveyStore]) -> AllSurveyCounts:
    """The event counts over every survey of the project."""
    aggregates = await survey_aggregates(caller.store, caller.project_id, None)
    return AllSurveyCounts(stats.merge(aggregates.values()), len(aggregates))


def all_survey_stats_json(counts: AllSurveyCounts) -> dict[str, Any]:
    """The event counts and rates over every survey of the project (PostHog's shape)."""
    return {**stats.stats_json(counts.aggregate), "survey_count": counts.survey_count}


async def survey_summary(
    caller: Caller[SurveyStore],
    survey_id: str,
    *,
    question_id: str | None = None,
    limit: int = stats.DEFAULT_PAGE,
    offset: int = 0,
) -> SurveyAnswers:
    """The answers per question (``question_id``: that one only), open answers paged."""
    survey = await find_survey(caller.store, caller.project_id, survey_id)
    if question_id is not None and not any(q.get("id") == question_id for q in survey.questions):
        raise ApiError(400, "invalid_input", "no question has this id", "question_id")
    aggregates = await survey_aggregates(caller.store, caller.project_id, [survey.id])
    state = aggregates.get(survey.id) or stats.SurveyStats()
    return SurveyAnswers(survey, state, question_id=question_id, limit=limit, offset=offset)


def survey_summary_json(answers: SurveyAnswers) -> dict[str, Any]:
    """The answers per question as ``/surveys/<id>/summary/`` answers them."""
    result = stats.summary(
        answers.aggregate,
        answers.survey.questions,
        question_id=answers.question_id,
        limit=answers.limit,
        offset=answers.offset,
    )
    return {"survey_id": answers.survey.id, **result}
