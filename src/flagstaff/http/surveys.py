"""Surveys and early access features: the management routes and what posthog-js reads.

Management (personal API key, PostHog's shapes), added to ``admin.ROUTES``:

* ``/api/projects/@current/surveys/`` list (paginated) and create; ``/<id>/`` GET, PATCH, PUT,
  DELETE; ``/<id>/archive/`` (POST, as a PATCH ``{"archived": true}``); ``/<id>/stats/`` and
  ``/stats/`` (every survey) with PostHog's counts and rates; ``/<id>/summary/`` per question
  (``?question_id=&limit=&offset=``, ours: choice and rating distributions, open answers
  paginated newest first).
* ``/api/projects/@current/early_access_feature/`` list and create; ``/<id>/`` GET, PATCH,
  DELETE.

A save validates the body (``surveys.validation`` / ``surveys.early_access``), plans the
changes to the flags the survey or feature maintains, turns each into a whole flag as the flag
API would (``flag_rules.flag_from_input``), and hands all of it to the store, which applies
it in one transaction.

Public (project token, CORS): ``GET /api/surveys/?token=`` and
``GET /api/early_access_features/?token=&stage=``, served from the per-worker
:class:`~flagstaff.server.caches.SurveysCache`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

import msgspec
from starlette.requests import Request as StarletteRequest

from flagstaff.activity.records import ChangeSource
from flagstaff.application import flags as flag_rules
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, invalid_input
from flagstaff.http.asgi import Request, Response
from flagstaff.http.products import project_from_query
from flagstaff.http.rest import int_param as _int_param
from flagstaff.http.rest import json_body as _body
from flagstaff.http.rest import paginated as _paginated
from flagstaff.server.services import Services
from flagstaff.store.base import Conflict, FlagWrite, Store
from flagstaff.surveys import early_access, public, stats
from flagstaff.surveys import flags as survey_flags
from flagstaff.surveys.early_access import EarlyAccessFeature, EarlyAccessInvalid, FlagFacts
from flagstaff.surveys.management import survey_json
from flagstaff.surveys.model import Survey, advance_iteration, format_datetime
from flagstaff.surveys.validation import LinkedFlag, SurveyContext, SurveyInvalid, survey_from_input

_encode = msgspec.json.encode
_ROLE_FIELD = {
    "targeting": "targeting_flag_id",
    "internal_targeting": "internal_targeting_flag_id",
}


def _now() -> datetime:
    return datetime.now(UTC)


def _minimal_flag(flag: dict[str, Any] | None) -> dict[str, Any] | None:
    """The flag as a survey or feature shows it (PostHog's ``MinimalFeatureFlagSerializer``)."""
    if flag is None:
        return None
    return {
        "id": flag["id"],
        "key": flag["key"],
        "name": flag.get("name", ""),
        "filters": flag.get("filters") or {},
        "active": flag.get("active", True),
        "deleted": flag.get("deleted", False),
        "ensure_experience_continuity": flag.get("ensure_experience_continuity", False),
    }


async def _flags_of(store: Store, project_id: int, ids: list[int | None]) -> dict[int, Any]:
    found: dict[int, Any] = {}
    for flag_id in ids:
        if flag_id is not None and flag_id not in found:
            flag = await store.get_flag(project_id, flag_id)
            if flag is not None and not flag.get("deleted"):
                found[flag_id] = _minimal_flag(flag)
    return found


# surveys: saving ---------------------------------------------------------------------------


async def _survey_out(store: Store, project_id: int, survey: Survey) -> dict[str, Any]:
    ids = [survey.linked_flag_id, survey.targeting_flag_id, survey.internal_targeting_flag_id]
    return survey_json(survey, await _flags_of(store, project_id, ids))


async def _stored_flag(store: Store, project_id: int, flag_id: int | None) -> dict | None:
    if flag_id is None:
        return None
    flag = await store.get_flag(project_id, flag_id)
    return None if flag is None or flag.get("deleted") else flag


def _flag_writes(
    changes: list[survey_flags.FlagChange], current: dict[int, dict[str, Any]]
) -> list[FlagWrite]:
    """Each planned change as a whole flag, checked as the flag API checks it."""
    writes = []
    for change in changes:
        if change.action == "create":
            data = flag_rules.flag_from_input(change.flag)
            writes.append(FlagWrite(data=data, target=_ROLE_FIELD[change.role]))
        else:
            assert change.flag_id is not None
            before = current[change.flag_id]
            body = {"deleted": True} if change.action == "delete" else change.flag or {}
            data = flag_rules.flag_from_input(body, before)
            writes.append(FlagWrite(data=data, flag_id=change.flag_id))
    return writes


async def save_survey(
    store: Store,
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
    targeting = await _stored_flag(store, project_id, survey.targeting_flag_id)
    internal = await _stored_flag(store, project_id, survey.internal_targeting_flag_id)
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
    current = {f["id"]: f for f in (targeting, internal) if f is not None}
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


async def _context(ctx: Caller[Store], body: Any, current: Survey | None) -> SurveyContext:
    linked_id = current.linked_flag_id if current is not None else None
    if isinstance(body, dict) and "linked_flag_id" in body:
        linked_id = body["linked_flag_id"]
    linked = None
    if isinstance(linked_id, int) and not isinstance(linked_id, bool):
        flag = await _stored_flag(ctx.store, ctx.project_id, linked_id)
        if flag is not None:
            variants = (flag.get("filters") or {}).get("multivariate") or {}
            linked = LinkedFlag(
                id=flag["id"],
                key=flag["key"],
                variants=tuple(
                    v["key"] for v in variants.get("variants") or [] if isinstance(v, dict)
                ),
            )
    names = await ctx.store.survey_names(ctx.project_id)
    if current is not None:
        names = {n for n in names if n != current.name}
    return SurveyContext(linked_flag=linked, other_names=frozenset(names))


# surveys: routes ----------------------------------------------------------------------------


async def list_surveys(ctx: Caller[Store], request: StarletteRequest) -> Any:
    limit = _int_param(request, "limit", 100, 1000) or 100
    offset = _int_param(request, "offset", 0)
    page = await ctx.store.list_surveys(ctx.project_id, limit, offset)
    results = [await _survey_out(ctx.store, ctx.project_id, s) for s in page.results]
    return _paginated(request, page.count, results, limit, offset)


async def create_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    body = await _body(request)
    try:
        inp = survey_from_input(body, None, now=_now(), context=await _context(ctx, body, None))
    except SurveyInvalid as exc:
        raise invalid_input(exc) from None
    saved = await save_survey(
        ctx.store,
        ctx.project_id,
        inp.survey,
        create=True,
        targeting_flag_filters=inp.targeting_flag_filters,
        source=ctx.source,
    )
    return 201, await _survey_out(ctx.store, ctx.project_id, saved)


def _path_uuid(request: StarletteRequest, name: str, what: str) -> str:
    """A survey or feature id from the path: a uuid, as they are made (anything else, such as
    text PostgreSQL cannot hold, names nothing)."""
    raw = request.path_params.get(name, "")
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise ApiError(404, "not_found", f"no such {what}") from None


async def _existing_survey(ctx: Caller[Store], request: StarletteRequest) -> Survey:
    survey_id = _path_uuid(request, "survey_id", "survey")
    survey = await ctx.store.get_survey(ctx.project_id, survey_id)
    if survey is None:
        raise ApiError(404, "not_found", "no such survey")
    return survey


async def get_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    return await _survey_out(ctx.store, ctx.project_id, await _existing_survey(ctx, request))


async def _update(ctx: Caller[Store], current: Survey, body: Any, *, partial: bool) -> Any:
    try:
        inp = survey_from_input(
            body,
            current,
            now=_now(),
            context=await _context(ctx, body, current),
            partial=partial,
        )
    except SurveyInvalid as exc:
        raise invalid_input(exc) from None
    saved = await save_survey(
        ctx.store,
        ctx.project_id,
        inp.survey,
        create=False,
        targeting_flag_filters=inp.targeting_flag_filters,
        remove_targeting_flag=inp.remove_targeting_flag,
        source=ctx.source,
    )
    return await _survey_out(ctx.store, ctx.project_id, saved)


async def patch_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    current = await _existing_survey(ctx, request)
    return await _update(ctx, current, await _body(request), partial=True)


async def put_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    current = await _existing_survey(ctx, request)
    return await _update(ctx, current, await _body(request), partial=False)


async def archive_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    current = await _existing_survey(ctx, request)
    return await _update(ctx, current, {"archived": True}, partial=True)


async def delete_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    survey = await _existing_survey(ctx, request)
    current = {}
    for flag_id in (survey.targeting_flag_id, survey.internal_targeting_flag_id):
        flag = await _stored_flag(ctx.store, ctx.project_id, flag_id)
        if flag is not None:
            current[flag["id"]] = flag
    changes = [c for c in survey_flags.plan_delete(survey) if c.flag_id in current]
    await ctx.store.delete_survey(
        ctx.project_id, survey.id, _flag_writes(changes, current), source=ctx.source
    )
    return 204, None


async def survey_stats(ctx: Caller[Store], request: StarletteRequest) -> Any:
    survey = await _existing_survey(ctx, request)
    aggregates = await ctx.store.survey_aggregates(ctx.project_id, [survey.id])
    body = stats.stats_json(aggregates.get(survey.id) or stats.SurveyStats())
    return {
        **body,
        "survey_id": survey.id,
        "start_date": format_datetime(survey.start_date),
        "end_date": format_datetime(survey.end_date),
    }


async def all_survey_stats(ctx: Caller[Store], request: StarletteRequest) -> Any:
    aggregates = await ctx.store.survey_aggregates(ctx.project_id, None)
    return {
        **stats.stats_json(stats.merge(aggregates.values())),
        "survey_count": len(aggregates),
    }


async def survey_summary(ctx: Caller[Store], request: StarletteRequest) -> Any:
    survey = await _existing_survey(ctx, request)
    question_id = request.query_params.get("question_id") or None
    if question_id is not None and not any(q.get("id") == question_id for q in survey.questions):
        raise ApiError(400, "invalid_input", "no question has this id", "question_id")
    limit = _int_param(request, "limit", stats.DEFAULT_PAGE, stats.MAX_PAGE) or 1
    offset = _int_param(request, "offset", 0)
    aggregates = await ctx.store.survey_aggregates(ctx.project_id, [survey.id])
    state = aggregates.get(survey.id) or stats.SurveyStats()
    result = stats.summary(
        state, survey.questions, question_id=question_id, limit=limit, offset=offset
    )
    return {"survey_id": survey.id, **result}


# early access features ----------------------------------------------------------------------


async def _feature_out(store: Store, project_id: int, feature: EarlyAccessFeature) -> Any:
    flags = await _flags_of(store, project_id, [feature.feature_flag_id])
    flag = flags.get(feature.feature_flag_id) if feature.feature_flag_id is not None else None
    out = early_access.feature_json(feature, flag)
    out["created_at"] = format_datetime(feature.created_at)
    return out


async def _save_feature(
    ctx: Caller[Store],
    feature: EarlyAccessFeature,
    changes: list[early_access.FlagChange],
    current: dict[int, dict[str, Any]],
    *,
    create: bool,
) -> EarlyAccessFeature:
    writes = []
    for change in changes:
        if change.action == "create":
            data = flag_rules.flag_from_input(change.flag)
            writes.append(FlagWrite(data=data, target="feature_flag_id"))
        else:
            assert change.flag_id is not None
            data = flag_rules.flag_from_input(change.flag, current[change.flag_id])
            writes.append(FlagWrite(data=data, flag_id=change.flag_id))
    try:
        return await ctx.store.save_early_access_feature(
            ctx.project_id, feature, writes, create=create, source=ctx.source
        )
    except Conflict as exc:
        if exc.field == "key":
            raise ApiError(
                400,
                "invalid_input",
                f"A feature flag with the key of this name already exists ({exc.message}); "
                "link it with feature_flag_id or choose another name",
                "name",
            ) from None
        raise ApiError(400, "unique", exc.message, exc.field) from None


async def list_features(ctx: Caller[Store], request: StarletteRequest) -> Any:
    limit = _int_param(request, "limit", 100, 1000) or 100
    offset = _int_param(request, "offset", 0)
    page = await ctx.store.list_early_access_features(ctx.project_id, limit, offset)
    results = [await _feature_out(ctx.store, ctx.project_id, f) for f in page.results]
    return _paginated(request, page.count, results, limit, offset)


async def create_feature(ctx: Caller[Store], request: StarletteRequest) -> Any:
    body = await _body(request)
    facts = None
    flag = None
    flag_id = body.get("feature_flag_id") if isinstance(body, dict) else None
    if isinstance(flag_id, int) and not isinstance(flag_id, bool):
        flag = await _stored_flag(ctx.store, ctx.project_id, flag_id)
        if flag is not None:
            filters = flag.get("filters") or {}
            linked = await ctx.store.early_access_feature_of_flag(ctx.project_id, flag_id)
            facts = FlagFacts(
                id=flag["id"],
                key=flag["key"],
                variant_count=len((filters.get("multivariate") or {}).get("variants") or []),
                aggregation_group_type_index=filters.get("aggregation_group_type_index"),
                linked_feature_id=linked,
            )
    try:
        feature = early_access.feature_from_input(body, None, now=_now(), flag=facts)
    except EarlyAccessInvalid as exc:
        raise invalid_input(exc) from None
    changes = early_access.plan_create(feature, flag)
    current = {flag["id"]: flag} if flag is not None else {}
    saved = await _save_feature(ctx, feature, changes, current, create=True)
    return 201, await _feature_out(ctx.store, ctx.project_id, saved)


async def _existing_feature(ctx: Caller[Store], request: StarletteRequest) -> EarlyAccessFeature:
    feature_id = _path_uuid(request, "feature_id", "early access feature")
    feature = await ctx.store.get_early_access_feature(ctx.project_id, feature_id)
    if feature is None:
        raise ApiError(404, "not_found", "no such early access feature")
    return feature


async def get_feature(ctx: Caller[Store], request: StarletteRequest) -> Any:
    return await _feature_out(ctx.store, ctx.project_id, await _existing_feature(ctx, request))


async def patch_feature(ctx: Caller[Store], request: StarletteRequest) -> Any:
    before = await _existing_feature(ctx, request)
    try:
        after = early_access.feature_from_input(await _body(request), before, now=_now())
    except EarlyAccessInvalid as exc:
        raise invalid_input(exc) from None
    flag = await _stored_flag(ctx.store, ctx.project_id, before.feature_flag_id)
    changes = early_access.plan_update(before, after, flag)
    current = {flag["id"]: flag} if flag is not None else {}
    saved = await _save_feature(ctx, after, changes, current, create=False)
    return await _feature_out(ctx.store, ctx.project_id, saved)


async def delete_feature(ctx: Caller[Store], request: StarletteRequest) -> Any:
    feature = await _existing_feature(ctx, request)
    flag = await _stored_flag(ctx.store, ctx.project_id, feature.feature_flag_id)
    writes = [
        FlagWrite(data=flag_rules.flag_from_input(c.flag, flag), flag_id=c.flag_id)
        for c in early_access.plan_delete(flag)
    ]
    await ctx.store.delete_early_access_feature(
        ctx.project_id, feature.id, writes, source=ctx.source
    )
    return 204, None


P = "/api/projects/{project_id}"
S = P + "/surveys/{survey_id}"
E = P + "/early_access_feature/{feature_id}"
ROUTES = [
    ("GET", P + "/surveys/", list_surveys, "List surveys"),
    ("POST", P + "/surveys/", create_survey, "Create a survey (and its targeting flags)"),
    ("GET", P + "/surveys/stats/", all_survey_stats, "Survey event counts over all surveys"),
    ("GET", S + "/", get_survey, "Get a survey"),
    ("PATCH", S + "/", patch_survey, "Update a survey"),
    ("PUT", S + "/", put_survey, "Replace a survey"),
    ("DELETE", S + "/", delete_survey, "Delete a survey and its targeting flags"),
    ("POST", S + "/archive/", archive_survey, "Archive a survey"),
    ("GET", S + "/stats/", survey_stats, "A survey's event counts and rates"),
    ("GET", S + "/summary/", survey_summary, "A survey's answers, per question"),
    ("GET", P + "/early_access_feature/", list_features, "List early access features"),
    ("POST", P + "/early_access_feature/", create_feature, "Create an early access feature"),
    ("GET", E + "/", get_feature, "Get an early access feature"),
    ("PATCH", E + "/", patch_feature, "Update an early access feature"),
    ("DELETE", E + "/", delete_feature, "Delete an early access feature (its flag is kept)"),
]


# public, with the project token -------------------------------------------------------------


async def _advance(svc: Services, project_id: int, surveys: list[Survey]) -> bool:
    """Move recurring surveys to the iteration running now; True when one moved."""
    moved = False
    now = _now()
    for survey in surveys:
        advanced = advance_iteration(survey, now)
        if advanced is not survey:
            await save_survey(svc.store, project_id, advanced, create=False)
            moved = True
    return moved


async def surveys_endpoint(svc: Services, request: Request) -> Response:
    """``GET /api/surveys/?token=``: the active surveys as posthog-js reads them."""
    project = await project_from_query(svc, request)
    snapshot = await svc.surveys.get(project.id)
    if await _advance(svc, project.id, snapshot.surveys):
        snapshot = await svc.surveys.get(project.id, reload=True)
    body = public.surveys_response(
        snapshot.surveys, snapshot.flag_keys, now=_now(), responses=snapshot.responses
    )
    return Response(_encode(body))


async def early_access_endpoint(svc: Services, request: Request) -> Response:
    """``GET /api/early_access_features/?token=&stage=`` (``stage`` may repeat)."""
    project = await project_from_query(svc, request)
    raw = request.query_string
    stages = early_access.parse_stages([v for k, v in parse_qsl(raw) if k == "stage"])
    unknown = [s for s in stages if s not in early_access.STAGES]
    if unknown:
        raise ApiError(
            400,
            "invalid_input",
            f"unknown stage {unknown[0]!r}; one of {', '.join(early_access.STAGES)}",
            "stage",
        )
    snapshot = await svc.surveys.get(project.id)
    body = public.early_access_response(snapshot.features, snapshot.flag_keys, stages)
    return Response(_encode(body))
