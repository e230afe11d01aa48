"""Surveys and early access features: the management routes and what posthog-js reads.

Management (personal API key, PostHog's shapes), added to ``admin.ROUTES``:

* ``/api/projects/@current/surveys/`` list (paginated) and create; ``/<id>/`` GET, PATCH, PUT,
  DELETE; ``/<id>/archive/`` (POST, as a PATCH ``{"archived": true}``); ``/<id>/stats/`` and
  ``/stats/`` (every survey) with PostHog's counts and rates; ``/<id>/summary/`` per question
  (``?question_id=&limit=&offset=``, ours: choice and rating distributions, open answers
  paginated newest first).
* ``/api/projects/@current/early_access_feature/`` list and create; ``/<id>/`` GET, PATCH,
  DELETE.

Each handler only adapts: it reads the path, the query and the body (decoded by the use
case's Struct, ``SurveyInput`` / ``EarlyAccessFeatureInput``), calls the use case of
:mod:`flagstaff.application.surveys` or :mod:`flagstaff.application.early_access`, and
answers the record it returns rendered by that module's ``*_json`` function.

Public (project token, CORS): ``GET /api/surveys/?token=`` and
``GET /api/early_access_features/?token=&stage=``, served from the per-worker
:class:`~flagstaff.server.caches.SurveysCache`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

import msgspec
from starlette.requests import Request as StarletteRequest

from flagstaff.application import early_access as features
from flagstaff.application import surveys
from flagstaff.application.context import Caller
from flagstaff.application.early_access import EarlyAccessFeatureInput
from flagstaff.application.inputs import decode
from flagstaff.application.surveys import SurveyInput
from flagstaff.http.asgi import Request, Response
from flagstaff.http.products import project_from_query
from flagstaff.http.rest import int_param as _int_param
from flagstaff.http.rest import json_body as _body
from flagstaff.http.rest import paginated as _paginated
from flagstaff.server.services import Services
from flagstaff.store.base import Store
from flagstaff.surveys import public, stats

_encode = msgspec.json.encode


def _now() -> datetime:
    return datetime.now(UTC)


async def _page(
    request: StarletteRequest,
    read: Callable[[int, int], Awaitable[tuple[int, list[dict[str, Any]]]]],
) -> Any:
    """A list route's page (``limit``/``offset``), its results read (and rendered) by
    ``read(limit, offset)``."""
    limit = _int_param(request, "limit", 100, 1000) or 100
    offset = _int_param(request, "offset", 0)
    count, results = await read(limit, offset)
    return _paginated(request, count, results, limit, offset)


def _survey_id(request: StarletteRequest) -> str:
    return str(request.path_params.get("survey_id", ""))


def _feature_id(request: StarletteRequest) -> str:
    return str(request.path_params.get("feature_id", ""))


# surveys ------------------------------------------------------------------------------------


async def list_surveys(ctx: Caller[Store], request: StarletteRequest) -> Any:
    async def read(limit: int, offset: int) -> tuple[int, list[dict[str, Any]]]:
        page = await surveys.list_surveys(ctx, limit, offset)
        return page.count, [surveys.survey_json(s) for s in page.results]

    return await _page(request, read)


async def create_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    inp = decode(SurveyInput, await _body(request))
    return 201, surveys.survey_json(await surveys.create_survey(ctx, inp))


async def get_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    return surveys.survey_json(await surveys.survey_of(ctx, _survey_id(request)))


async def patch_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    inp = decode(SurveyInput, await _body(request))
    saved = await surveys.update_survey(ctx, _survey_id(request), inp, partial=True)
    return surveys.survey_json(saved)


async def put_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    inp = decode(SurveyInput, await _body(request))
    saved = await surveys.update_survey(ctx, _survey_id(request), inp, partial=False)
    return surveys.survey_json(saved)


async def archive_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    return surveys.survey_json(await surveys.archive_survey(ctx, _survey_id(request)))


async def delete_survey(ctx: Caller[Store], request: StarletteRequest) -> Any:
    await surveys.delete_survey(ctx, _survey_id(request))
    return 204, None


async def survey_stats(ctx: Caller[Store], request: StarletteRequest) -> Any:
    return surveys.survey_stats_json(await surveys.survey_stats(ctx, _survey_id(request)))


async def all_survey_stats(ctx: Caller[Store], request: StarletteRequest) -> Any:
    return surveys.all_survey_stats_json(await surveys.all_survey_stats(ctx))


async def survey_summary(ctx: Caller[Store], request: StarletteRequest) -> Any:
    answers = await surveys.survey_summary(
        ctx,
        _survey_id(request),
        question_id=request.query_params.get("question_id") or None,
        limit=_int_param(request, "limit", stats.DEFAULT_PAGE, stats.MAX_PAGE) or 1,
        offset=_int_param(request, "offset", 0),
    )
    return surveys.survey_summary_json(answers)


# early access features ----------------------------------------------------------------------


async def list_features(ctx: Caller[Store], request: StarletteRequest) -> Any:
    async def read(limit: int, offset: int) -> tuple[int, list[dict[str, Any]]]:
        page = await features.list_features(ctx, limit, offset)
        return page.count, [features.feature_json(f) for f in page.results]

    return await _page(request, read)


async def create_feature(ctx: Caller[Store], request: StarletteRequest) -> Any:
    inp = decode(EarlyAccessFeatureInput, await _body(request))
    return 201, features.feature_json(await features.create_feature(ctx, inp))


async def get_feature(ctx: Caller[Store], request: StarletteRequest) -> Any:
    return features.feature_json(await features.feature_of(ctx, _feature_id(request)))


async def patch_feature(ctx: Caller[Store], request: StarletteRequest) -> Any:
    inp = decode(EarlyAccessFeatureInput, await _body(request))
    return features.feature_json(await features.update_feature(ctx, _feature_id(request), inp))


async def delete_feature(ctx: Caller[Store], request: StarletteRequest) -> Any:
    await features.delete_feature(ctx, _feature_id(request))
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


async def surveys_endpoint(svc: Services, request: Request) -> Response:
    """``GET /api/surveys/?token=``: the active surveys as posthog-js reads them."""
    project = await project_from_query(svc, request)
    snapshot = await svc.surveys.get(project.id)
    now = _now()
    if await surveys.advance_iterations(svc.store, project.id, snapshot.surveys, now):
        snapshot = await svc.surveys.get(project.id, reload=True)
    body = public.surveys_response(
        snapshot.surveys, snapshot.flag_keys, now=now, responses=snapshot.responses
    )
    return Response(_encode(body))


async def early_access_endpoint(svc: Services, request: Request) -> Response:
    """``GET /api/early_access_features/?token=&stage=`` (``stage`` may repeat)."""
    project = await project_from_query(svc, request)
    raw = request.query_string
    stages = features.public_stages([v for k, v in parse_qsl(raw) if k == "stage"])
    snapshot = await svc.surveys.get(project.id)
    body = public.early_access_response(snapshot.features, snapshot.flag_keys, stages)
    return Response(_encode(body))
