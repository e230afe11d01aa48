"""The approvals page (``/approvals``): the project's policy (admins switch it), pending change
requests with their readable diff and Approve / Reject buttons, and the recent decisions.
Decisions are made by ``static/approvals.js`` calling the documented management API."""

from __future__ import annotations

from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from flagstaff.activity.approvals import ApprovalPolicy, ChangeRequest, RequestStatus
from flagstaff.application import accounts as account_cases
from flagstaff.application.approvals import ApprovalReads, change_requests, current_policy
from flagstaff.application.flags import find_flag
from flagstaff.console import review_views
from flagstaff.console.page import Page, page_route
from flagstaff.console.routes import ConsolePages
from flagstaff.flags.records import FeatureFlag

MAX_PENDING = 200


class ApprovalData(Protocol):
    async def approval_policy(self, project_id: int) -> ApprovalPolicy: ...

    async def change_requests(
        self, project_id: int, status: RequestStatus | None, limit: int
    ) -> list[ChangeRequest]:
        """Newest first."""
        ...

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None: ...


class StoreApprovalData:
    """The page's reads, through the approvals' reads (``application/approvals.py``, whose
    use cases the management API calls to decide and to change the policy)."""

    def __init__(self, store: ApprovalReads) -> None:
        self.store = store

    async def approval_policy(self, project_id: int) -> ApprovalPolicy:
        return await current_policy(self.store, project_id)

    async def change_requests(
        self, project_id: int, status: RequestStatus | None, limit: int
    ) -> list[ChangeRequest]:
        page = await change_requests(self.store, project_id, status, None, limit, 0)
        return list(page.results)

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None:
        return await find_flag(self.store, project_id, flag_id)


def approval_routes(pages: ConsolePages, data: ApprovalData) -> list[BaseRoute]:
    async def approvals_page(request: Request, page: Page) -> Response:
        principal, project = page.principal, page.project
        now = pages.clock()
        members = await account_cases.project_members(pages.accounts, project.id)
        emails = {m.user.id: m.user.email for m in members}
        pending = await data.change_requests(project.id, RequestStatus.PENDING, MAX_PENDING)
        recent = [
            r
            for r in await data.change_requests(project.id, None, review_views.RECENT_DECIDED * 2)
            if r.status is not RequestStatus.PENDING
        ][: review_views.RECENT_DECIDED]
        flags: dict[int, FeatureFlag | None] = {}
        for found in pending + recent:
            if found.flag_id is not None and found.flag_id not in flags:
                flags[found.flag_id] = await data.get_flag(project.id, found.flag_id)

        def rows(requests: list[ChangeRequest]) -> list[review_views.RequestRow]:
            return [
                review_views.request_row(
                    r, flags.get(r.flag_id) if r.flag_id else None, emails, principal, now
                )
                for r in requests
            ]

        return page.render(
            "approvals.html",
            "approvals",
            policy=await data.approval_policy(project.id),
            pending=rows(pending),
            recent=rows(recent),
        )

    return [page_route(pages, "/approvals", approvals_page)]
