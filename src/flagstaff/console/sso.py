"""Single sign-on's console routes: ``/login/oidc`` sends the browser to the provider,
``/login/oidc/callback`` finishes the sign-in (``accounts/sso_login.py``) and starts a session,
or answers a page saying why not, with a log line and (once the browser's state matched) an
activity record. The provider over HTTP is ``server/oidc.py``."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from flagstaff.accounts import cookies, csrf, oidc, sso_login
from flagstaff.accounts.oidc import ProviderUnreachable, SsoConfig
from flagstaff.accounts.sso_login import Refusal, Refused
from flagstaff.console.page import SECURITY_HEADERS, error_page
from flagstaff.console.routes import ConsolePages, safe_next
from flagstaff.ops import logs

STATE_COOKIE = "flagstaff_oidc"

_PAGES: dict[Refusal, tuple[int, str, str]] = {
    Refusal.STATE: (
        400,
        "Sign-in not accepted",
        "This sign-in was not started by this browser, took too long or was already used.",
    ),
    Refusal.PROVIDER_ERROR: (403, "Sign-in not completed", "The identity provider refused it."),
    Refusal.CODE: (400, "Sign-in not accepted", "The identity provider refused the sign-in code."),
    Refusal.TOKEN: (
        400,
        "Sign-in not accepted",
        "The identity provider's answer could not be trusted.",
    ),
    Refusal.NOT_ALLOWED: (403, "No access", "You are not allowed to use this console."),
    Refusal.UNREACHABLE: (
        502,
        "Identity provider unreachable",
        "The identity provider did not answer; try again later.",
    ),
    Refusal.ACCOUNT: (409, "Sign-in not accepted", "Your email belongs to another account."),
}


class SsoPages:
    def __init__(
        self, pages: ConsolePages, config: SsoConfig, provider: sso_login.Provider
    ) -> None:
        self.pages = pages
        self.config = config
        self.provider = provider

    def _secure(self) -> bool:
        return self.config.public_url.startswith("https://")

    def _state_cookie(self, value: str, max_age_s: int) -> str:
        # Lax: the provider sends the browser back with a top-level GET from its own site.
        return cookies.set_cookie_header(
            STATE_COOKIE,
            value,
            max_age_s=max_age_s,
            secure=self._secure(),
            path=oidc.START_PATH,
            same_site="Lax",
        )

    def _refused(self, request: Request, refused: Refused) -> Response:
        status, title, message = _PAGES[refused.refusal]
        logs.log(
            logging.WARNING,
            "single sign-on refused",
            refusal=refused.refusal.value,
            reason=refused.reason,
            who=refused.name,
            ip=request.client.host if request.client else "",
        )
        response = error_page(None, status, title, message, refused.reason)
        if refused.refusal is not Refusal.STATE:
            # (a request with another state leaves this browser's own sign-in alone)
            response.headers.append("set-cookie", self._state_cookie("", 0))
        return response

    async def start(self, request: Request) -> Response:
        next_path = safe_next(request.query_params.get("next"))
        try:
            url, state = await sso_login.start(
                self.pages.accounts, self.provider, next_path, self.pages.clock()
            )
        except ProviderUnreachable as exc:
            return self._refused(request, Refused(Refusal.UNREACHABLE, str(exc)))
        response = RedirectResponse(url, 303, headers=SECURITY_HEADERS)
        max_age = oidc.LOGIN_STATE_TTL_MS // 1000
        response.headers.append("set-cookie", self._state_cookie(state, max_age))
        return response

    async def callback(self, request: Request) -> Response:
        query = request.query_params
        now = self.pages.clock()
        taken = await sso_login.take_state(
            self.pages.accounts, query.get("state"), request.cookies.get(STATE_COOKIE), now
        )
        if isinstance(taken, Refused):
            # Not recorded in the activity log: anyone can send such a request.
            return self._refused(request, taken)
        if query.get("error"):
            error = query.get("error", "")[:100]
            detail = query.get("error_description", "")[:200]
            refused = Refused(Refusal.PROVIDER_ERROR, f"{error}: {detail}" if detail else error)
        elif not query.get("code"):
            refused = Refused(Refusal.CODE, "the provider sent no code")
        else:
            try:
                outcome = await sso_login.finish(
                    self.pages.accounts,
                    self.provider,
                    self.config,
                    taken,
                    query.get("code", ""),
                    request.client.host if request.client else "",
                    request.headers.get("user-agent", ""),
                    now,
                    query.get("iss"),
                )
            except ProviderUnreachable as exc:
                outcome = Refused(Refusal.UNREACHABLE, str(exc))
            if isinstance(outcome, sso_login.SignedIn):
                return self._signed_in(request, outcome)
            refused = outcome
        await sso_login.record_refusal(self.pages.accounts, self.config, refused, now)
        return self._refused(request, refused)

    def _signed_in(self, request: Request, done: sso_login.SignedIn) -> Response:
        sync = done.sync
        logs.log(
            logging.INFO,
            "single sign-on",
            user_id=done.user.id,
            email=done.user.email,
            role=sync.role.value if sync.role else None,
            previous_role=sync.previous_role.value if sync.previous_role else None,
            created=sync.created,
        )
        response = RedirectResponse(done.next_path, 303, headers=SECURITY_HEADERS)
        max_age = max(1, (done.session.expires_at_ms - self.pages.clock()) // 1000)
        response.headers.append(
            "set-cookie", cookies.session_cookie(done.session.token, max_age, self._secure())
        )
        response.headers.append("set-cookie", self._state_cookie("", 0))
        response.headers.append(
            "set-cookie", cookies.clear_cookie(csrf.LOGIN_CSRF_COOKIE, self._secure())
        )
        return response


def sso_routes(
    pages: ConsolePages, config: SsoConfig, provider: sso_login.Provider
) -> list[BaseRoute]:
    sso = SsoPages(pages, config, provider)
    return [
        Route(oidc.START_PATH, sso.start, methods=["GET"]),
        Route(oidc.CALLBACK_PATH, sso.callback, methods=["GET"]),
    ]
