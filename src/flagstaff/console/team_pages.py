"""The console's team pages: members and roles, cohorts (the builder, static cohorts from a
CSV), groups and the flags they get, ingestion warnings, project settings.

Rendered on the server from :class:`~flagstaff.console.team_data.TeamData`; changes are made by
``static/team.js`` through the documented management API (members, cohorts, the project), so
a page can do nothing its viewer's role would be refused by the API. Registered through
:func:`team_routes` next to the flag pages, whose session and rendering helpers they share.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from flagstaff.accounts.roles import Action
from flagstaff.application import accounts as account_cases
from flagstaff.console import team_views, views
from flagstaff.console.page import Page, found_numbered, page_route
from flagstaff.console.routes import ConsolePages, redirect
from flagstaff.console.team_data import GROUPS_PER_PAGE, WARNINGS_PER_PAGE, TeamData
from flagstaff.store.rows import WARNINGS_KEPT

MAX_QUERY = 200


def _offset(request: Request) -> int:
    raw = request.query_params.get("offset", "")
    return min(int(raw), 10_000_000) if raw.isdigit() else 0


class TeamPages:
    def __init__(self, pages: ConsolePages, data: TeamData) -> None:
        self.pages = pages
        self.data = data

    # members -------------------------------------------------------------------------------

    async def members(self, request: Request, page: Page) -> Response:
        auth, project = page.auth, page.project
        members = await account_cases.project_members(self.pages.accounts, project.id)
        rows = team_views.member_rows(members, auth.user.id)
        return page.render(
            "members.html",
            "members",
            members=rows,
            admins=team_views.admins(rows),
            role_choices=team_views.ROLE_CHOICES,
        )

    # cohorts -------------------------------------------------------------------------------

    async def cohorts(self, request: Request, page: Page) -> Response:
        project = page.project
        cohorts = await self.data.cohorts(project.id)
        counts = await self.data.dynamic_counts(project.id, cohorts)
        return page.render(
            "cohorts.html",
            "cohorts",
            rows=team_views.cohort_rows(cohorts, counts),
            counts=counts,
        )

    async def _builder(self, project_id: int, cohort_id: int | None) -> dict[str, Any]:
        cohorts = await self.data.cohorts(project_id)
        return {
            "group_types": sorted((await self.data.group_types(project_id)).items()),
            "cohorts": [c for c in cohorts if c.id != cohort_id],
            "other_flags": [],
            "property_keys": sorted(await self.pages.data.property_keys(project_id)),
        }

    async def new_cohort(self, request: Request, page: Page) -> Response:
        project = page.project
        return page.render(
            "cohort_edit.html",
            "cohorts",
            cohort=team_views.cohort_editor_model(None),
            ctx=await self._builder(project.id, None),
            filter_types=team_views.COHORT_FILTER_TYPES,
            members=[],
            count="",
        )

    async def cohort(self, request: Request, page: Page) -> Response:
        project = page.project
        cohort = await found_numbered(
            request, page, "cohort_id", self.data.cohort, "There is no such cohort."
        )
        if isinstance(cohort, Response):
            return cohort
        members: list[str] = []
        count = ""
        if cohort.is_static:
            members = await self.data.static_members(project.id, cohort.id)
            count = team_views.count_text(cohort, team_views.NO_COUNTS)
        else:
            everything = await self.data.cohorts(project.id)
            counts = await self.data.dynamic_counts(project.id, everything, [cohort.id])
            count = team_views.count_text(cohort, counts)
        return page.render(
            "cohort_edit.html",
            "cohorts",
            cohort=team_views.cohort_editor_model(cohort),
            ctx=await self._builder(project.id, cohort.id),
            filter_types=team_views.COHORT_FILTER_TYPES,
            members=members,
            count=count,
        )

    # groups --------------------------------------------------------------------------------

    async def group_types(self, request: Request, page: Page) -> Response:
        types = await self.data.group_types(page.project.id)
        if types:
            target = f"/groups/{min(types)}"
            if request.url.query:
                target += f"?{request.url.query}"
            return redirect(target)
        return page.render(
            "groups.html", "groups", types=[], index=None, groups=[], search="", more=False
        )

    async def _group_type(self, request: Request, project_id: int) -> tuple[dict[int, str], int]:
        """The project's group types, and the index the path names (-1: not a number)."""
        types = await self.data.group_types(project_id)
        raw = request.path_params.get("group_type_index", "")
        return types, int(raw) if raw.isdigit() else -1

    async def groups(self, request: Request, page: Page) -> Response:
        project = page.project
        types, index = await self._group_type(request, project.id)
        if index not in types:
            return page.not_found("There is no such group type.")
        search = request.query_params.get("search", "").strip()[:MAX_QUERY]
        offset = _offset(request)
        groups = await self.data.groups(project.id, index, search, offset)
        return page.render(
            "groups.html",
            "groups",
            types=sorted(types.items()),
            index=index,
            type_name=types[index],
            groups=groups[:GROUPS_PER_PAGE],
            search=search,
            offset=offset,
            more=len(groups) > GROUPS_PER_PAGE,
            per_page=GROUPS_PER_PAGE,
        )

    async def group(self, request: Request, page: Page) -> Response:
        project = page.project
        types, index = await self._group_type(request, project.id)
        key = request.path_params.get("group_key", "")
        group = await self.data.group(project.id, index, key) if index in types else None
        if group is None:
            return page.not_found("There is no such group.")
        flags = await self.data.group_flags(project.id, types[index], index, key)
        return page.render(
            "group.html",
            "groups",
            group=group,
            properties=views.property_rows(group.properties),
            flags=flags,
        )

    # ingestion warnings --------------------------------------------------------------------

    async def warnings(self, request: Request, page: Page) -> Response:
        project = page.project
        offset = _offset(request)
        everything = await self.data.warnings(project.id, WARNINGS_KEPT, 0)
        shown = everything.results[offset : offset + WARNINGS_PER_PAGE]
        return page.render(
            "ingestion_warnings.html",
            "warnings",
            rows=team_views.warning_rows(shown),
            summary=team_views.warning_summary(everything.results),
            total=everything.count,
            kept=WARNINGS_KEPT,
            offset=offset,
            per_page=WARNINGS_PER_PAGE,
        )

    # project settings ----------------------------------------------------------------------

    async def project_settings(self, request: Request, page: Page) -> Response:
        project = await self.data.project(page.project.id)
        if project is None:
            return page.not_found("There is no such project.")
        flag_quota, event_quota = self.data.quotas()
        usage = await self.data.usage(project.id)
        return page.render(
            "project_settings.html",
            "settings",
            settings_project=project,
            retention_days=await self.data.event_retention(project.id),
            stats_defaults=await self.data.experiment_stats_defaults(project.id),
            figures=team_views.usage_figures(usage, flag_quota, event_quota),
        )

    def routes(self) -> list[BaseRoute]:
        pages = self.pages
        return [
            page_route(pages, "/members", self.members),
            page_route(pages, "/cohorts", self.cohorts),
            page_route(
                pages,
                "/cohorts/new",
                self.new_cohort,
                Action.EDIT,
                "Viewers cannot create cohorts.",
            ),
            page_route(pages, "/cohorts/{cohort_id}", self.cohort),
            page_route(pages, "/groups", self.group_types),
            page_route(pages, "/groups/{group_type_index}", self.groups),
            page_route(pages, "/groups/{group_type_index}/{group_key:path}", self.group),
            page_route(pages, "/ingestion_warnings", self.warnings),
            page_route(pages, "/settings/project", self.project_settings),
        ]


def team_routes(pages: ConsolePages, data: TeamData) -> list[BaseRoute]:
    """The team pages' routes, for :func:`~flagstaff.console.routes.console_routes`' ``extra``."""
    return TeamPages(pages, data).routes()
