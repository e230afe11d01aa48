"""The webhooks page of the project settings (``/settings/webhooks``, admins): create (the
secret shown once), enable or disable, delete, and each webhook's recent deliveries with a
Redeliver button. Changes are made by ``static/webhooks.js`` through the management API."""

from __future__ import annotations

from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from flagstaff.accounts.roles import Action
from flagstaff.activity.webhooks import Delivery, Webhook
from flagstaff.application.webhooks import WebhookReads, deliveries_page, project_webhooks
from flagstaff.console import review_views
from flagstaff.console.page import Page, page_route
from flagstaff.console.routes import ConsolePages


class WebhookData(Protocol):
    async def webhooks(self, project_id: int) -> list[Webhook]: ...

    async def deliveries(self, project_id: int, webhook_id: int, limit: int) -> list[Delivery]:
        """Newest first."""
        ...


class StoreWebhookData:
    """The page's reads, through the webhooks' reads (``application/webhooks.py``, whose use
    cases the management API calls to change them)."""

    def __init__(self, store: WebhookReads) -> None:
        self.store = store

    async def webhooks(self, project_id: int) -> list[Webhook]:
        return await project_webhooks(self.store, project_id)

    async def deliveries(self, project_id: int, webhook_id: int, limit: int) -> list[Delivery]:
        page = await deliveries_page(self.store, project_id, webhook_id, limit, 0)
        return list(page.results)


def webhook_routes(pages: ConsolePages, data: WebhookData) -> list[BaseRoute]:
    async def webhooks_page(request: Request, page: Page) -> Response:
        project = page.project
        rows = [
            review_views.webhook_row(
                hook, await data.deliveries(project.id, hook.id, review_views.RECENT_DELIVERIES)
            )
            for hook in await data.webhooks(project.id)
        ]
        return page.render(
            "webhooks.html",
            "webhooks",
            webhooks=rows,
            scope_choices=review_views.SCOPE_CHOICES,
        )

    return [
        page_route(
            pages,
            "/settings/webhooks",
            webhooks_page,
            Action.MANAGE,
            "Only admins manage webhooks.",
        )
    ]
