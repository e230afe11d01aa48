"""One way to answer a console page.

A page handler asks :meth:`ConsolePages.open_page` for its :class:`Page`: the signed-in
person, their principal in the project asked for, and the project; or the answer already
given (the login redirect, "not a member", "viewers cannot ...") when there is none. The page
then answers with :meth:`Page.render` (the template inside the console's shell: user, CSRF
token, project, role, which navigation entry is current, what the role may do),
:meth:`Page.not_found` or :meth:`Page.refuse`; :func:`found_numbered` finds the stored object
a path names by its id, or answers the 404 page. Pages without a project (login, single
sign-on's refusals) use :func:`projectless_page`, :func:`error_page` and :func:`html_page`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from flagstaff.accounts import login as console_session
from flagstaff.accounts.roles import Action, Principal, can
from flagstaff.console import templates

STATIC_URL = "/console/static"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class ProjectInfo(msgspec.Struct, frozen=True):
    id: int
    name: str


def html_page(body: str, status: int = 200) -> HTMLResponse:
    """A rendered page with the console's security headers."""
    return HTMLResponse(body, status, headers=SECURITY_HEADERS)


def projectless_page(
    template: str,
    auth: console_session.Authenticated | None,
    status: int = 200,
    **values: Any,
) -> HTMLResponse:
    """``template`` in the console's shell outside any project (the login page, errors): the
    signed-in person if any, no project, role or navigation entry."""
    body = templates.render(
        template,
        user=auth.user if auth else None,
        csrf_token=auth.csrf_token if auth else "",
        project=None,
        role="",
        static_url=STATIC_URL,
        nav="",
        **values,
    )
    return html_page(body, status)


def error_page(
    auth: console_session.Authenticated | None,
    status: int,
    title: str,
    message: str,
    reason: str | None = None,
) -> HTMLResponse:
    """A page saying what went wrong; with ``reason``, a refused login (no session)."""
    return projectless_page("error.html", auth, status, title=title, message=message, reason=reason)


@dataclass(frozen=True, slots=True)
class Page:
    """A console request its person may see: who, in which project, and how to answer."""

    auth: console_session.Authenticated
    principal: Principal
    project: ProjectInfo

    def can(self, action: Action) -> bool:
        return can(self.principal.role, action)

    def shell(self) -> dict[str, Any]:
        """What every page's frame shows: the person, the project, the role, the form token."""
        return {
            "user": self.auth.user,
            "csrf_token": self.auth.csrf_token,
            "project": self.project,
            "role": self.principal.role.value,
            "static_url": STATIC_URL,
            "can_edit": self.can(Action.EDIT),
            "can_manage": self.can(Action.MANAGE),
        }

    def render(
        self, template: str, nav: str, http_status: int = 200, **values: Any
    ) -> HTMLResponse:
        """``template`` in the console's shell, ``nav`` its navigation entry."""
        body = templates.render(template, **{**self.shell(), "nav": nav, **values})
        return html_page(body, http_status)

    def error(self, status: int, title: str, message: str) -> HTMLResponse:
        return error_page(self.auth, status, title, message)

    def not_found(self, message: str) -> HTMLResponse:
        return self.error(404, "Not found", message)

    def refuse(self, message: str) -> HTMLResponse:
        return self.error(403, "No access", message)


class PageOpener(Protocol):
    """What opens a page (:class:`~flagstaff.console.routes.ConsolePages`)."""

    async def open_page(
        self, request: Request, action: Action = Action.VIEW, refused: str = ""
    ) -> Page | Response: ...


PageView = Callable[[Request, Page], Awaitable[Response]]
"""A page's own part: what it shows once its :class:`Page` is open."""


class Stored(Protocol):
    """A stored thing a page shows (a flag, a cohort): deleted ones are not found."""

    @property
    def deleted(self) -> bool: ...


S = TypeVar("S", bound=Stored)


async def found_numbered(
    request: Request,
    page: Page,
    param: str,
    read: Callable[[int, int], Awaitable[S | None]],
    missing: str,
) -> S | Response:
    """The stored record whose id the path gives in ``param``, read by
    ``read(project_id, id)``; or the 404 page saying ``missing`` when that is not a number, or
    the project has no such record, or it is deleted."""
    raw = request.path_params.get(param, "")
    found = await read(page.project.id, int(raw)) if raw.isdigit() else None
    if found is None or found.deleted:
        return page.not_found(missing)
    return found


def page_route(
    pages: PageOpener, path: str, view: PageView, action: Action = Action.VIEW, refused: str = ""
) -> Route:
    """A GET route at ``path`` answering ``view(request, page)`` when ``pages`` opens the page
    (for ``action``, else ``refused``), or the answer ``open_page`` gave instead (the login
    page, "not a member", a refusal)."""

    async def endpoint(request: Request) -> Response:
        page = await pages.open_page(request, action, refused)
        if isinstance(page, Response):
            return page
        return await view(request, page)

    return Route(path, endpoint, methods=["GET"])
