"""The console's page handlers (starlette routes), over two small interfaces: the accounts'
:class:`AccountStore` and :class:`ConsoleData`, the read views the pages show.

Pages are rendered on the server from plain data; changes are made by ``static/console.js``
calling the documented management API with the session cookie and the CSRF header, so the
console can do nothing the API would refuse.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, quote

import msgspec
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from flagstaff.accounts import cookies, csrf, passwords, sessions, throttle
from flagstaff.accounts import login as console_session
from flagstaff.accounts.roles import Action
from flagstaff.accounts.store import AccountStore
from flagstaff.activity.records import StoredActivity
from flagstaff.activity.rollback import FlagVersion
from flagstaff.activity.scheduled import ScheduledChange
from flagstaff.application import accounts as account_cases
from flagstaff.application.errors import ApiError
from flagstaff.application.flag_usage import FlagChecks
from flagstaff.common.clock import now_ms
from flagstaff.console import charts, paging, usage, views
from flagstaff.console.page import (
    SECURITY_HEADERS,
    STATIC_URL,
    Page,
    PageView,
    ProjectInfo,
    error_page,
    found_numbered,
    page_route,
    projectless_page,
)
from flagstaff.flags.explain import Explanation
from flagstaff.flags.explain import render as render_explanation
from flagstaff.flags.records import FeatureFlag
from flagstaff.store.base import Person

STATIC_DIR = Path(__file__).parent / "static"
MAX_FORM_BYTES = 16_384
VIEWERS_CANNOT_CREATE = "Viewers cannot create feature flags."

FlagView = Callable[[Request, Page, FeatureFlag], Awaitable[Response]]
"""A flag page's own part: what it shows of the path's flag (the management API's JSON)."""


class ConsoleData(Protocol):
    """What the pages read. Flags and cohorts are the management API's JSON objects."""

    async def project(self, project_id: int) -> ProjectInfo | None: ...

    async def list_flags(self, project_id: int) -> list[dict[str, Any]]: ...

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None: ...

    async def flag_last_seen(self, project_id: int, keys: Sequence[str]) -> dict[str, int]:
        """The last check of each of these flags (never checked: left out)."""
        ...

    async def flag_usage(
        self, project_id: int, now_ms: int, keys: Sequence[str]
    ) -> dict[str, views.FlagUsage]:
        """Usage of these flags over the last 30 days (checked ones only), from the rollup of
        ``$feature_flag_called`` events."""
        ...

    async def flag_checks(self, project_id: int, flag: FeatureFlag, now_ms: int) -> FlagChecks:
        """The flag's checks per day and value over the last 30 days."""
        ...

    async def group_types(self, project_id: int) -> dict[int, str]: ...

    async def list_cohorts(self, project_id: int) -> list[dict[str, Any]]: ...

    async def property_keys(self, project_id: int) -> list[str]:
        """Person and group property keys seen in the project, for the builder's suggestions."""
        ...

    async def flag_activity(self, project_id: int, flag_id: int) -> list[StoredActivity]:
        """The flag's activity records (scope FeatureFlag, item_id the flag's id)."""
        ...

    async def flag_versions(self, project_id: int, flag_id: int) -> list[FlagVersion]: ...

    async def explain_flag(
        self,
        project_id: int,
        key: str,
        distinct_id: str,
        person_properties: dict[str, Any],
        groups: dict[str, Any],
    ) -> Explanation:
        """Why the flag evaluates as it does for this person (``flags/explain.py``)."""
        ...

    async def person(self, project_id: int, distinct_id: str) -> Person | None: ...

    async def scheduled_changes(self, project_id: int, flag_id: int) -> list[ScheduledChange]: ...

    async def person_flags(self, project_id: int, distinct_id: str) -> list[views.PersonFlag]:
        """Every active flag's value for the person now, as /flags would answer."""
        ...

    async def recent_events(
        self, project_id: int, event: str | None, distinct_id: str | None, limit: int
    ) -> list[views.EventRow]:
        """The newest events, newest first (the live events page)."""
        ...

    async def events_per_minute(self, project_id: int, start_ms: int, minutes: int) -> list[int]:
        """Events by timestamp in each minute from ``start_ms`` (``charts.EVENT_CHART_CAP`` at
        most each)."""
        ...


class ConsoleSettings(msgspec.Struct, frozen=True):
    trust_forwarded: bool = False
    sso_name: str | None = None
    """Single sign-on's provider name: the login page offers "Sign in with" it."""
    password_login_off: bool = False
    """``FLAGSTAFF_OIDC_ONLY``: only break-glass users may log in by password."""
    session_policy: sessions.SessionPolicy = sessions.DEFAULT_POLICY
    throttle_policy: throttle.ThrottlePolicy = throttle.DEFAULT_THROTTLE


def _redirect(location: str) -> RedirectResponse:
    return RedirectResponse(location, 303, headers=SECURITY_HEADERS)


redirect = _redirect
"""A 303 with the console's security headers, for page modules of their own."""


def safe_next(value: str | None) -> str:
    """Only local paths are followed after login (no open redirect): one leading slash, no
    backslash (browsers read ``/\\evil`` as ``//evil``), no control characters or spaces
    (browsers drop tabs and newlines, so ``/<tab>/evil`` would become ``//evil``)."""
    if (
        not value
        or len(value) > 2000
        or not value.startswith("/")
        or value.startswith("//")
        or "\\" in value
        or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in value)
    ):
        return "/feature_flags"
    return value


async def _form(request: Request) -> dict[str, str]:
    raw = await request.body()
    if len(raw) > MAX_FORM_BYTES:
        return {}
    parsed = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


class ConsolePages:
    def __init__(
        self,
        accounts: AccountStore,
        data: ConsoleData,
        settings: ConsoleSettings = ConsoleSettings(),  # noqa: B008
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.accounts = accounts
        self.data = data
        self.settings = settings
        self.clock = clock

    # helpers -------------------------------------------------------------------------------

    def _secure(self, request: Request) -> bool:
        return cookies.request_is_secure(
            request.url.scheme, request.headers, self.settings.trust_forwarded
        )

    async def _auth(self, request: Request) -> console_session.Authenticated | None:
        return await console_session.resolve(
            self.accounts,
            request.cookies.get(cookies.SESSION_COOKIE),
            self.clock(),
            self.settings.session_policy,
        )

    async def open_page(
        self, request: Request, action: Action = Action.VIEW, refused: str = ""
    ) -> Page | Response:
        """The request's :class:`Page`: its signed-in person (else the login page, then back
        here), in the project asked for (``?project=``) or their first, with at least the
        role ``action`` needs (else ``refused``, a 403 page); or the answer already given."""
        auth = await self._auth(request)
        if auth is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return _redirect(f"/login?next={quote(target, safe='')}")
        wanted = request.query_params.get("project")
        project_id = int(wanted) if wanted and wanted.isdigit() else None
        memberships = await account_cases.memberships(self.accounts, auth.user.id)
        principal = console_session.principal_for(auth, memberships, project_id)
        project = await self.data.project(principal.project_id) if principal else None
        if principal is None or project is None:
            return error_page(
                auth, 403, "No access", "You are not a member of this project. Ask an admin."
            )
        page = Page(auth, principal, project)
        if not page.can(action):
            return page.refuse(refused or "Your role cannot do this here.")
        return page

    # pages ---------------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        auth = await self._auth(request)
        return _redirect("/feature_flags" if auth else "/login")

    def _login_page(
        self, request: Request, status: int, error: str, email: str, next_path: str
    ) -> Response:
        token = request.cookies.get(csrf.LOGIN_CSRF_COOKIE) or csrf.new_login_csrf()
        response = projectless_page(
            "login.html",
            None,
            status,
            login_csrf=token,
            error=error,
            email=email,
            next=next_path,
            sso_name=self.settings.sso_name,
            sso_url=f"/login/oidc?next={quote(next_path, safe='')}",
            password_login_off=self.settings.password_login_off,
        )
        response.headers.append(
            "set-cookie",
            cookies.set_cookie_header(
                csrf.LOGIN_CSRF_COOKIE,
                token,
                max_age_s=3600,
                secure=self._secure(request),
                same_site="Strict",
            ),
        )
        return response

    async def login_form(self, request: Request) -> Response:
        if await self._auth(request) is not None:
            return _redirect(safe_next(request.query_params.get("next")))
        return self._login_page(request, 200, "", "", safe_next(request.query_params.get("next")))

    async def login(self, request: Request) -> Response:
        form = await _form(request)
        email = form.get("email", "")
        next_path = safe_next(form.get("next"))
        if not csrf.login_csrf_valid(
            request.cookies.get(csrf.LOGIN_CSRF_COOKIE), form.get(csrf.CSRF_FIELD)
        ) or not csrf.origin_allowed(request.headers, request.url.netloc):
            return self._login_page(
                request, 403, "The form expired; please log in again.", email, next_path
            )
        outcome = await console_session.log_in(
            self.accounts,
            email,
            form.get("password", ""),
            request.client.host if request.client else "",
            request.headers.get("user-agent", ""),
            self.clock(),
            self.settings.session_policy,
            self.settings.throttle_policy,
            password_login_off=self.settings.password_login_off,
        )
        if outcome.session is None:
            response = self._login_page(request, outcome.status, outcome.error, email, next_path)
            if outcome.retry_after_s:
                response.headers["retry-after"] = str(outcome.retry_after_s)
            return response
        secure = self._secure(request)
        response = _redirect(next_path)
        max_age = self.settings.session_policy.lifetime_ms // 1000
        response.headers.append(
            "set-cookie", cookies.session_cookie(outcome.session.token, max_age, secure)
        )
        response.headers.append("set-cookie", cookies.clear_cookie(csrf.LOGIN_CSRF_COOKIE, secure))
        return response

    async def logout(self, request: Request) -> Response:
        token = request.cookies.get(cookies.SESSION_COOKIE)
        auth = await self._auth(request)
        if auth is not None and token:
            form = await _form(request)
            if not csrf.csrf_valid(token, form.get(csrf.CSRF_FIELD)):
                return error_page(
                    auth, 403, "Not logged out", "The form expired; reload and try again."
                )
            await account_cases.log_out(self.accounts, sessions.hash_session_token(token))
        response = _redirect("/login")
        response.headers.append(
            "set-cookie", cookies.clear_cookie(cookies.SESSION_COOKIE, self._secure(request))
        )
        return response

    async def flags(self, request: Request, page: Page) -> Response:
        project = page.project
        now = self.clock()
        flags = await self.data.list_flags(project.id)
        keys = [str(f.get("key")) for f in flags if not f.get("deleted")]
        seen = await self.data.flag_last_seen(project.id, keys)  # stale: every flag's
        filters = views.ListFilters.from_query(request.query_params)
        rows = views.flag_rows(flags, usage.last_checks(seen), filters, now)
        shown = paging.page_of(rows, request.query_params)
        used = await self.data.flag_usage(project.id, now, [r.key for r in shown.rows])
        shown = msgspec.structs.replace(shown, rows=usage.with_usage(shown.rows, used))
        return page.render(
            "flags.html",
            "flags",
            filters=filters,
            rows=rows,
            page=shown,
            total=sum(1 for f in flags if not f.get("deleted")),
            tags=views.all_tags(flags),
        )

    async def _editor(self, page: Page, flag: FeatureFlag | None) -> Response:
        project = page.project
        flags = await self.data.list_flags(project.id)
        cohorts = await self.data.list_cohorts(project.id)
        group_types = await self.data.group_types(project.id)
        flag_id = flag.id if flag else None
        builder = {
            "group_types": sorted(group_types.items()),
            "cohorts": [c for c in cohorts if not c.get("deleted")],
            "other_flags": [
                {"id": f["id"], "key": f["key"]}
                for f in sorted(flags, key=lambda f: str(f.get("key")))
                if not f.get("deleted") and f.get("id") != flag_id
            ],
            "property_keys": sorted(await self.data.property_keys(project.id)),
        }
        charts = None
        if flag is not None:
            checks = await self.data.flag_checks(project.id, flag, self.clock())
            charts = usage.flag_charts(flag.key, checks)
        return page.render(
            "flag_edit.html",
            "flags",
            flag=views.editor_model(flag),
            ctx=builder,
            usage=charts,
        )

    async def new_flag(self, request: Request, page: Page) -> Response:
        return await self._editor(page, None)

    def flag_view(self, view: FlagView) -> PageView:
        """The page of the path's flag (``flag_id``): ``view`` of it, or the 404 page when the
        project has none."""

        async def opened(request: Request, page: Page) -> Response:
            flag = await found_numbered(
                request, page, "flag_id", self.data.get_flag, "There is no such feature flag."
            )
            return flag if isinstance(flag, Response) else await view(request, page, flag)

        return opened

    async def edit_flag(self, request: Request, page: Page, flag: FeatureFlag) -> Response:
        return await self._editor(page, flag)

    async def _account_page(
        self, page: Page, message: str = "", failed: bool = False, status: int = 200
    ) -> Response:
        project = page.project
        admin = page.can(Action.MANAGE)
        keys = await account_cases.keys_seen_by(self.accounts, project.id, page.principal)
        members = await account_cases.project_members(self.accounts, project.id) if admin else []
        owners = {m.user.id: m.user.email for m in members}
        return page.render(
            "account.html",
            "account",
            http_status=status,
            keys=sorted(keys, key=lambda k: (k.revoked, -k.created_at_ms)),
            show_owner=admin,
            owners=owners,
            password_message=message,
            password_failed=failed,
            min_password=passwords.MIN_PASSWORD_LENGTH,
        )

    async def account(self, request: Request, page: Page) -> Response:
        return await self._account_page(page)

    async def change_password(self, request: Request) -> Response:
        """A plain form post (session + CSRF field): checks the current password, stores the
        new hash and ends the user's other sessions."""
        page = await self.open_page(request)
        if isinstance(page, Response):
            return page
        auth = page.auth
        form = await _form(request)
        token = request.cookies.get(cookies.SESSION_COOKIE) or ""
        problem = console_session.csrf_problem(
            "POST", request.headers, request.url.netloc, token, form.get(csrf.CSRF_FIELD)
        )
        if problem is not None:
            return await self._account_page(page, "The form expired; try again.", True, 403)
        try:
            ended = await account_cases.change_password(
                self.accounts,
                auth.user,
                auth.session.id,
                form.get("current_password", ""),
                form.get("new_password", ""),
            )
        except ApiError as refused:
            return await self._account_page(page, refused.detail, True, refused.status)
        note = f" {ended} other session(s) were logged out." if ended else ""
        return await self._account_page(page, "Your password was changed." + note)

    async def events(self, request: Request, page: Page) -> Response:
        """Live events: the newest events now; the page's script then polls the events API."""
        project = page.project
        event = request.query_params.get("event", "")[:200]
        distinct_id = request.query_params.get("distinct_id", "")[:200]
        rows = await self.data.recent_events(
            project.id, event or None, distinct_id or None, views.LIVE_EVENT_ROWS
        )
        start = charts.chart_start(self.clock())
        per_minute = await self.data.events_per_minute(
            project.id, start, charts.EVENT_CHART_MINUTES
        )
        return page.render(
            "events.html",
            "events",
            events=rows,
            chart=charts.events_per_minute_chart(per_minute, start, charts.EVENT_CHART_CAP),
            event_filter=event,
            distinct_id_filter=distinct_id,
        )

    async def flag_schedule(self, request: Request, page: Page, flag: FeatureFlag) -> Response:
        changes = await self.data.scheduled_changes(page.project.id, flag.id)
        rows = [
            views.ScheduledRow(
                c.id, c.run_at_ms, views.describe_scheduled(c.payload), c.executed_at_ms, c.failure
            )
            for c in changes
        ]
        return page.render("flag_schedule.html", "flags", flag=flag, changes=rows)

    async def persons(self, request: Request, page: Page) -> Response:
        project = page.project
        distinct_id = request.query_params.get("distinct_id", "").strip()[:200]
        person = await self.data.person(project.id, distinct_id) if distinct_id else None
        flags: list[views.PersonFlag] = []
        events: list[views.EventRow] = []
        if person is not None:
            flags = await self.data.person_flags(project.id, distinct_id)
            events = await self.data.recent_events(
                project.id, None, distinct_id, views.PERSON_EVENT_ROWS
            )
        return page.render(
            "persons.html",
            "persons",
            http_status=200 if person is not None or not distinct_id else 404,
            distinct_id=distinct_id,
            person=person,
            properties=views.property_rows(person.properties) if person else [],
            flags=flags,
            events=events,
        )

    async def test_user(self, request: Request, page: Page, flag: FeatureFlag) -> Response:
        """The "test a user" panel: a read-only form (GET) evaluating the flag step by step."""
        query = request.query_params
        distinct_id = query.get("distinct_id", "")[:200]
        raw_properties = query.get("person_properties", "")[:MAX_FORM_BYTES]
        raw_groups = query.get("groups", "")[:MAX_FORM_BYTES]
        explanation, problem = None, ""
        if distinct_id:
            try:
                person_properties = views.json_object(raw_properties, "Person properties")
                groups = views.json_object(raw_groups, "Groups")
                explanation = await self.data.explain_flag(
                    page.project.id, flag.key, distinct_id, person_properties, groups
                )
            except ValueError as exc:
                problem = str(exc)
        return page.render(
            "flag_test.html",
            "flags",
            http_status=400 if problem else 200,
            flag=flag,
            distinct_id=distinct_id,
            person_properties=raw_properties,
            groups=raw_groups,
            explanation=explanation,
            steps=render_explanation(explanation) if explanation else "",
            problem=problem,
        )

    async def flag_history(self, request: Request, page: Page, flag: FeatureFlag) -> Response:
        activities = await self.data.flag_activity(page.project.id, flag.id)
        versions = await self.data.flag_versions(page.project.id, flag.id)
        return page.render(
            "flag_history.html",
            "flags",
            flag=flag,
            entries=views.history_entries(activities, versions, flag.version),
        )


def console_routes(
    accounts: AccountStore,
    data: ConsoleData,
    settings: ConsoleSettings = ConsoleSettings(),  # noqa: B008
    clock: Callable[[], int] = now_ms,
    extra: Sequence[Callable[[ConsolePages], list[BaseRoute]]] = (),
) -> list[BaseRoute]:
    """The console's routes, to be placed in front of the management API's starlette app;
    ``extra`` builds the routes of page modules of their own (team, approvals, webhooks), each
    from the flag pages' :class:`ConsolePages`, whose session and rendering helpers they share."""
    pages = ConsolePages(accounts, data, settings, clock)
    return [
        *(route for build in extra for route in build(pages)),
        Route("/", pages.home, methods=["GET"]),
        Route("/login", pages.login_form, methods=["GET"]),
        Route("/login", pages.login, methods=["POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
        page_route(pages, "/account", pages.account),
        Route("/account/password", pages.change_password, methods=["POST"]),
        page_route(pages, "/feature_flags", pages.flags),
        page_route(pages, "/feature_flags/new", pages.new_flag, Action.EDIT, VIEWERS_CANNOT_CREATE),
        page_route(pages, "/feature_flags/{flag_id}", pages.flag_view(pages.edit_flag)),
        page_route(pages, "/feature_flags/{flag_id}/history", pages.flag_view(pages.flag_history)),
        page_route(pages, "/feature_flags/{flag_id}/test", pages.flag_view(pages.test_user)),
        page_route(
            pages, "/feature_flags/{flag_id}/schedule", pages.flag_view(pages.flag_schedule)
        ),
        page_route(pages, "/events", pages.events),
        page_route(pages, "/persons", pages.persons),
        Mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="console-static"),
    ]
