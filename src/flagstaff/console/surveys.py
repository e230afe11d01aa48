"""The survey pages: ``/surveys`` (list), ``/surveys/new`` and ``/surveys/{id}/edit`` (the
builder, with a preview drawn by posthog-js's own ``surveys-preview.js`` in a frame,
``/console/survey-preview``), and ``/surveys/{id}`` (counts and rates, a chart per question,
the open answers newest first, paged). Changes are made by ``static/surveys.js`` through the
management API."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from flagstaff.accounts.roles import Action
from flagstaff.application import surveys
from flagstaff.application.errors import ApiError
from flagstaff.application.surveys import ShownSurvey, SurveyStore
from flagstaff.common.clock import minute_text
from flagstaff.console import paging, survey_views
from flagstaff.console.page import SECURITY_HEADERS, STATIC_URL, Page, page_route
from flagstaff.console.routes import ConsolePages
from flagstaff.surveys import stats
from flagstaff.surveys.model import Survey

MAX_LISTED = 1000
ANSWERS_PAGE = 20
VIEWERS_CANNOT = "Viewers cannot change surveys."
PREVIEW_HEADERS = {
    **SECURITY_HEADERS,
    # posthog-js's preview adds a <style> element of its own: allowed in this frame only.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "SAMEORIGIN",
}


class SurveyData(Protocol):
    async def surveys(self, project_id: int) -> list[Survey]: ...

    async def survey(self, project_id: int, survey_id: str) -> Survey | None: ...

    async def aggregates(
        self, project_id: int, survey_ids: list[str] | None
    ) -> dict[str, stats.SurveyStats]: ...

    async def shown_survey(self, project_id: int, survey: Survey) -> ShownSurvey:
        """The survey with its flags, rendered as the management API answers it for the
        builder."""
        ...

    async def property_keys(self, project_id: int) -> list[str]: ...


class StoreSurveyData:
    """The survey reads of the management API (:mod:`flagstaff.application.surveys`), so the
    pages show what the API answers."""

    def __init__(self, store: SurveyStore, property_keys: Any) -> None:
        self.store = store
        self._property_keys = property_keys

    async def surveys(self, project_id: int) -> list[Survey]:
        return list((await surveys.surveys_page(self.store, project_id, MAX_LISTED, 0)).results)

    async def survey(self, project_id: int, survey_id: str) -> Survey | None:
        try:
            return await surveys.find_survey(self.store, project_id, survey_id)
        except ApiError:
            return None

    async def aggregates(
        self, project_id: int, survey_ids: list[str] | None
    ) -> dict[str, stats.SurveyStats]:
        return await surveys.survey_aggregates(self.store, project_id, survey_ids)

    async def shown_survey(self, project_id: int, survey: Survey) -> ShownSurvey:
        return await surveys.shown_survey(self.store, project_id, survey)

    async def property_keys(self, project_id: int) -> list[str]:
        return list(await self._property_keys(project_id))


def _now() -> datetime:
    return datetime.now(UTC)


PREVIEW_PAGE = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Survey preview</title>
<link rel="stylesheet" href="{STATIC_URL}/survey_preview.css">
<script type="module" src="{STATIC_URL}/survey_preview.js"></script></head>
<body><div id="preview" aria-live="polite"></div></body></html>"""


def survey_routes(pages: ConsolePages, data: SurveyData) -> list[BaseRoute]:
    async def list_page(request: Request, page: Page) -> Response:
        project = page.project
        now = _now()
        found = await data.surveys(project.id)
        counted = await data.aggregates(project.id, None)
        rows = [
            survey_views.survey_row(s, (counted.get(s.id) or stats.SurveyStats()).responses, now)
            for s in found
        ]
        return page.render(
            "surveys.html",
            "surveys",
            rows=rows,
        )

    async def builder(page: Page, survey: Survey | None) -> Response:
        project = page.project
        stored = (
            surveys.survey_json(await data.shown_survey(project.id, survey))
            if survey is not None
            else None
        )
        return page.render(
            "survey_edit.html",
            "surveys",
            survey=survey,
            survey_json=json.dumps(stored),
            property_keys=await data.property_keys(project.id),
        )

    async def new_page(request: Request, page: Page) -> Response:
        return await builder(page, None)

    async def found(request: Request, page: Page) -> Survey | Response:
        """The path's survey, or the 404 page."""
        survey = await data.survey(page.project.id, str(request.path_params["survey_id"]))
        return page.not_found("No such survey.") if survey is None else survey

    async def edit_page(request: Request, page: Page) -> Response:
        survey = await found(request, page)
        if isinstance(survey, Response):
            return survey
        # The role is looked at once the survey is found: an unknown one is a 404 for everyone.
        if not page.can(Action.EDIT):
            return page.refuse(VIEWERS_CANNOT)
        return await builder(page, survey)

    async def survey_page(request: Request, page: Page) -> Response:
        project = page.project
        survey = await found(request, page)
        if isinstance(survey, Response):
            return survey
        state = (await data.aggregates(project.id, [survey.id])).get(survey.id)
        state = state or stats.SurveyStats()
        number = paging.page_number(request.query_params)
        offset = (number - 1) * ANSWERS_PAGE
        summary = stats.summary(state, survey.questions, limit=ANSWERS_PAGE, offset=offset)
        questions = [survey_views.question_view(q) for q in summary["questions"]]
        most = max((q.answers_count for q in questions), default=0)
        return page.render(
            "survey.html",
            "surveys",
            survey=survey,
            status=survey_views.status_of(survey, _now()),
            type_label=survey_views.TYPE_LABELS.get(survey.type, survey.type),
            start=minute_text(survey.start_date),
            end=minute_text(survey.end_date),
            counters=survey_views.counters(stats.stats_json(state)),
            responses=summary["responses"],
            questions=questions,
            page=number,
            page_size=ANSWERS_PAGE,
            more=offset + ANSWERS_PAGE < most,
            survey_json=json.dumps(
                surveys.survey_json(await data.shown_survey(project.id, survey))
            ),
        )

    async def preview(request: Request) -> Response:
        return Response(PREVIEW_PAGE, media_type="text/html", headers=PREVIEW_HEADERS)

    return [
        page_route(pages, "/surveys", list_page),
        page_route(pages, "/surveys/new", new_page, Action.EDIT, VIEWERS_CANNOT),
        page_route(pages, "/surveys/{survey_id}/edit", edit_page),
        page_route(pages, "/surveys/{survey_id}", survey_page),
        Route("/console/survey-preview", preview, methods=["GET"]),
    ]
