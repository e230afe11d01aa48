"""Builds the application: hot public routes on a thin dispatcher, /api/ on starlette.

Public routes (flags, SDK definitions, capture, product lists, operations) are found by one
dict look-up on the path without its trailing slash, and :data:`PATTERN_ROUTES` (posthog-js
config, static bundles, remote config) by their prefix; everything else goes to the starlette
management app. The app speaks both of granian's interfaces: RSGI (what ``flagstaff serve``
runs, see :mod:`flagstaff.http.rsgi`) and ASGI (any ASGI server). Both call the same
:meth:`FlagstaffApp._answer`; only reading the body and sending the answer differ.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from flagstaff.accounts.csrf import SAFE_METHODS
from flagstaff.accounts.store import AccountStore
from flagstaff.application.errors import ApiError, error_body
from flagstaff.console.wiring import console_for
from flagstaff.http import capture, flags, ofrep, ops, products, rsgi, static, surveys
from flagstaff.http.admin import ROUTES, build_admin
from flagstaff.http.asgi import (
    Receive,
    Request,
    Response,
    Scope,
    Send,
    cors_headers,
    discard_body,
    read_body,
    send_response,
)
from flagstaff.http.auth import principal_auth
from flagstaff.http.docs import docs_routes
from flagstaff.http.limits import (
    MAX_URL_BYTES,
    RETRY_AFTER_SECONDS,
    BodyReaders,
    MemoryBudget,
    linger_bytes,
)
from flagstaff.http.openapi import openapi_document, schema_route
from flagstaff.http.unavailable import store_unavailable
from flagstaff.ops import logs
from flagstaff.ops.allocator import tune_allocator
from flagstaff.server.config import Settings
from flagstaff.server.draining import DRAINING
from flagstaff.server.outage import OUTAGE
from flagstaff.server.services import Services

Handler = Callable[[Services, Request], Awaitable[Response]]
AnyRequest = Request | rsgi.RsgiRequest
"""What the hot handlers receive: both request types have the same attributes."""


ErrorBody = Callable[[int, str, str, str | None], bytes]
"""``(status, code, detail, attr) -> body`` of an error answer."""


class PublicRoute:
    __slots__ = ("cors", "errors", "handler", "methods", "name")

    def __init__(
        self,
        name: str,
        handler: Handler,
        methods: frozenset[str],
        cors: bool,
        errors: ErrorBody = error_body,
    ) -> None:
        self.name = name
        self.handler = handler
        self.methods = methods
        self.cors = cors
        self.errors = errors
        """How the route's errors answered before (or around) its handler look: PostHog's
        shape, or the route's protocol's (OFREP)."""


_GET = frozenset({"GET", "HEAD"})
_POST = frozenset({"POST"})
_CAPTURE = frozenset({"GET", "POST"})


def public_routes() -> dict[str, PublicRoute]:
    routes: dict[str, PublicRoute] = {
        "/_health": PublicRoute("/_health", ops.health, _GET, False),
        "/_ready": PublicRoute("/_ready", ops.ready, _GET, False),
        "/metrics": PublicRoute("/metrics", ops.metrics, _GET, False),
        "/flags": PublicRoute("/flags", flags.flags_endpoint, _POST | _GET, True),
        "/decide": PublicRoute("/decide", flags.decide_endpoint, _POST | _GET, True),
        "/flags/definitions": PublicRoute(
            "/flags/definitions", flags.definitions_endpoint, _GET, True
        ),
        "/api/feature_flag/local_evaluation": PublicRoute(
            "/api/feature_flag/local_evaluation", flags.definitions_endpoint, _GET, True
        ),
        "/ofrep/v1/evaluate/flags": PublicRoute(
            "/ofrep/v1/evaluate/flags", ofrep.evaluate_flags_endpoint, _POST, True, ofrep.error
        ),
        "/ofrep/v1/configuration": PublicRoute(
            "/ofrep/v1/configuration", ofrep.configuration_endpoint, _GET, True, ofrep.error
        ),
    }
    for path, handler in (
        ("/api/web_experiments", products.web_experiments_endpoint),
        ("/api/product_tours", products.product_tours_endpoint),
        ("/api/surveys", surveys.surveys_endpoint),
        ("/api/early_access_features", surveys.early_access_endpoint),
    ):
        routes[path] = PublicRoute(path, handler, _GET, True)
    for path in ("/e", "/i/v0/e", "/capture", "/batch", "/track", "/engage", "/s"):
        routes[path] = PublicRoute(path, capture.capture_endpoint, _CAPTURE, True)
    return routes


"""Methods that change nothing; any other request to the management API that is not refused
with a 4xx bumps the node's change counter."""

_ARRAY = PublicRoute("/array/{token}/config", flags.array_config_endpoint, _GET, True)
_STATIC = PublicRoute("/static/{name}", static.static_endpoint, _GET, True)
_REMOTE_CONFIG = PublicRoute(
    "/api/projects/{id}/feature_flags/{key}/remote_config", flags.remote_config_endpoint, _GET, True
)
_OFREP_FLAG = PublicRoute(
    "/ofrep/v1/evaluate/flags/{key}", ofrep.evaluate_flag_endpoint, _POST, True, ofrep.error
)
PATTERN_ROUTES = (_ARRAY, _STATIC, _REMOTE_CONFIG, _OFREP_FLAG)
"""Public routes found by a path prefix rather than the dict look-up."""


_RETRY_AFTER = (b"retry-after", str(RETRY_AFTER_SECONDS).encode())
_CLOSE = (b"connection", b"close")
"""On an answer given before the request's body was read: the unread rest of the body is
still on the connection, so the client must not send its next request there (HTTP/1.1,
RFC 9112 section 9.6); without it a client reusing the connection may see it dropped."""


_NO_LINGER = frozenset({400, 408})
"""Early answers after which the rest of the body is not read: the client went away (400) or
stopped sending (408)."""


def _content_length(value: str | None) -> int:
    return int(value) if value is not None and value.isdigit() else 0


class FlagstaffApp:
    def __init__(self, settings: Settings, services: Services | None = None) -> None:
        self.settings = settings
        self.services = services or Services(settings)
        self.routes = public_routes()
        document = openapi_document(ROUTES, [*self.routes.values(), *PATTERN_ROUTES])
        accounts: AccountStore = self.services.store
        self.admin = build_admin(
            self.services.store,
            principal_auth(accounts),
            [schema_route(document), *docs_routes(), *console_for(settings, self.services.store)],
        )
        self._body_limit = settings.body_limit
        # One boolean per request when off: the access log costs nothing unless asked for.
        self._access_log = settings.access_log or settings.log_level == "debug"
        self.readers = BodyReaders(settings.body_timeout_seconds, settings.max_uploads)
        self.budget = MemoryBudget(settings.memory_budget_mb * 1024 * 1024)

    def _route_for(self, path: str) -> PublicRoute | None:
        key = path.rstrip("/") or "/"
        route = self.routes.get(key)
        if route is not None:
            return route
        if key.startswith("/array/"):
            return _ARRAY
        if key.startswith("/static/"):
            return _STATIC
        if key.startswith("/api/projects/") and key.endswith("/remote_config"):
            return _REMOTE_CONFIG
        if key.startswith(ofrep.SINGLE_PREFIX):
            return _OFREP_FLAG
        return None

    # The request handling both interfaces share ---------------------------------------------

    async def _answer(
        self,
        route: PublicRoute,
        request: AnyRequest,
        read: Callable[[Any, int, BodyReaders], Awaitable[bytes]],
        source: Any,
    ) -> Response:
        """The answer of a public route; ``read(source, limit, readers)`` reads a POST's body
        (with the body timeouts and, for large bodies, within the worker's memory budget)."""
        method = request.method
        if method == "OPTIONS" and route.cors:
            return Response(b"", 200, content_type=b"text/plain")
        if method not in route.methods:
            return Response(
                route.errors(405, "method_not_allowed", f"{method} is not allowed here", None), 405
            )
        cost = 0
        unread = method == "POST"
        declared = 0
        try:
            if unread:
                limit = self._body_limit
                declared = _content_length(request.headers.get("content-length"))
                if declared > limit:
                    raise ApiError(
                        413, "payload_too_large", f"the request body is larger than {limit} bytes"
                    )
                cost = self.budget.admit(declared)
                request.body = await read(source, limit, self.readers)
                unread = False
                if not cost:
                    cost = self.budget.admit(len(request.body))
            # The hot handlers are typed against the ASGI Request; RsgiRequest has the same
            # attributes (both are RequestBase), so either may be passed.
            return await route.handler(self.services, request)  # type: ignore[arg-type]
        except ApiError as exc:
            headers = [_RETRY_AFTER] if exc.status == 503 else []
            linger = 0
            if unread:
                headers.append(_CLOSE)
                if exc.status not in _NO_LINGER:
                    linger = linger_bytes(declared, self._body_limit)
            body = route.errors(exc.status, exc.code, exc.detail, exc.attr)
            return Response(body, exc.status, headers=headers or None, linger=linger)
        except Exception as exc:
            refusal = store_unavailable(exc, request.path)
            if refusal is not None:
                body = route.errors(503, refusal.code, refusal.detail, None)
                return Response(body, 503, headers=[_RETRY_AFTER])
            logs.logger.exception("unhandled error on %s", request.path)
            body = route.errors(500, "server_error", "the server failed to answer", None)
            return Response(body, 500)
        finally:
            self.budget.release(cost)

    def _done(self, name: str, request: AnyRequest, status: int, started: float) -> None:
        """Metrics and logs after a request has been answered."""
        elapsed = time.perf_counter() - started
        self.services.metrics.observe_request(name, status, elapsed)
        # A 503 is a refusal with its own log (a storage outage logs once, not per request).
        if status >= 500 and status != 503 and name != "/api":
            logs.log(logging.ERROR, "request failed", path=request.path, status=status)
        if self._access_log:
            logs.access(
                request.method,
                request.path,
                status,
                round(elapsed * 1000, 3),
                _request_id(request.headers.get("x-request-id")),
            )

    # ASGI -------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        request = Request(scope, b"")
        route = self._route_for(scope["path"])
        if len(scope["path"]) + len(scope.get("query_string", b"")) > MAX_URL_BYTES:
            response = _url_too_long(request, self._body_limit, route)
            await send_response(send, response, None)
            if response.linger:
                await discard_body(receive, response.linger)
            self._done("/url_too_long", request, 414, started)
            return
        if route is None:
            if not _has_body(request):
                status = await self._admin(scope, receive, send)
            else:
                tracked = _TrackedReceive(receive)
                status = await self._admin(scope, tracked, send)
                if not tracked.complete:  # answered before its body was read (a 413)
                    declared = _content_length(request.headers.get("content-length"))
                    await discard_body(receive, linger_bytes(declared, self._body_limit))
            self._done("/api", request, status, started)
            return
        response = await self._answer(route, request, read_body, receive)
        if DRAINING.active:
            _close_after(response)
        await send_response(send, response, cors_headers(scope) if route.cors else None)
        if response.linger:
            await discard_body(receive, response.linger)
        self._done(route.name, request, response.status, started)

    # RSGI (granian's native interface): what `flagstaff serve` runs ---------------------------

    def __rsgi_init__(self, loop: Any) -> None:
        loop.run_until_complete(self.services.start())
        DRAINING.install(loop, self.settings.shutdown_grace_seconds, self.settings.port)

    def __rsgi_del__(self, loop: Any) -> None:
        loop.run_until_complete(self.services.stop())

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        started = time.perf_counter()
        path = scope.path
        request = rsgi.RsgiRequest(scope, protocol)
        route = self._route_for(path)
        if len(path) + len(scope.query_string) > MAX_URL_BYTES:
            response = _url_too_long(request, self._body_limit, route)
            rsgi.send_response(protocol, response, None)
            if response.linger:
                await rsgi.discard_body(request, response.linger)
            self._done("/url_too_long", request, 414, started)
            return
        if route is None:
            try:
                body = await rsgi.read_body(request, self._body_limit, self.readers)
            except ApiError as exc:
                if exc.status in _NO_LINGER:
                    protocol.response_bytes(exc.status, rsgi.JSON_HEADERS, exc.body())
                else:
                    protocol.response_bytes(exc.status, rsgi.CLOSE_HEADERS, exc.body())
                    declared = _content_length(request.headers.get("content-length"))
                    await rsgi.discard_body(request, linger_bytes(declared, self._body_limit))
                self._done("/api", request, exc.status, started)
                return
            status = await rsgi.call_asgi(self._admin, scope, protocol, body)
            self._done("/api", request, status, started)
            return
        response = await self._answer(route, request, rsgi.read_body, request)
        if DRAINING.active:
            _close_after(response)
        rsgi.send_response(protocol, response, rsgi.cors_headers(scope) if route.cors else None)
        if response.linger:
            await rsgi.discard_body(request, response.linger)
        self._done(route.name, request, response.status, started)

    async def _admin(self, scope: Scope, receive: Receive, send: Send) -> int:
        status = 500
        writes = scope["method"] not in SAFE_METHODS
        changes = self.services.changes

        async def tracking_send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if DRAINING.active:
                    message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
                if writes and status < 400 and OUTAGE.down:
                    OUTAGE.recovered()  # a write went through: storage is back
                if writes and not 400 <= status < 500:
                    # Before the answer leaves: whoever sees it, then asks any worker, is
                    # answered from the changed data. A refused request (401, 404, invalid
                    # input) wrote nothing; after a 500 nobody knows, so it bumps too.
                    changes.bump()
            await send(message)

        try:
            await self.admin(scope, receive, tracking_send)
        except Exception:
            # Starlette re-raises what its error handler has answered (and logged, or counted
            # as a storage outage): do not let the server log it again, once per request.
            if status == 500:
                raise
        return status

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.services.start()
                except Exception as exc:
                    logs.logger.exception("start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                DRAINING.install(
                    asyncio.get_running_loop(),
                    self.settings.shutdown_grace_seconds,
                    self.settings.port,
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.services.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _close_after(response: Response) -> None:
    """A stopping worker closes each connection after its answer (see server.draining)."""
    headers = response.headers
    if headers is None:
        response.headers = [_CLOSE]
    elif _CLOSE not in headers:
        headers.append(_CLOSE)


def _url_too_long(request: AnyRequest, body_limit: int, route: PublicRoute | None) -> Response:
    """414 with a JSON body (in the route's own error shape: OFREP's on /ofrep/); a body sent
    with it is read and dropped before the close."""
    detail = f"the URL is longer than {MAX_URL_BYTES} bytes"
    render = route.errors if route is not None else error_body
    body = render(414, "uri_too_long", detail, None)
    declared = _content_length(request.headers.get("content-length"))
    linger = 0
    if declared or "transfer-encoding" in request.headers:
        linger = linger_bytes(declared, body_limit)
    return Response(body, 414, headers=[_CLOSE], linger=linger)


def _has_body(request: Request) -> bool:
    headers = request.headers
    return _content_length(headers.get("content-length")) > 0 or "transfer-encoding" in headers


class _TrackedReceive:
    """An ASGI ``receive`` that notes whether the request's body was read to its end."""

    __slots__ = ("complete", "receive")

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.complete = False

    async def __call__(self) -> dict[str, Any]:
        message = await self.receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.complete = True
        return message


def _request_id(given: str | None) -> str:
    """The client's ``X-Request-Id`` (up to 200 characters), else a new random one."""
    if given and len(given) <= 200:
        return given
    return secrets.token_hex(8)


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this worker if the serving process dies, so no orphan keeps the port."""
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return


def create_app() -> FlagstaffApp:
    """The factory the HTTP server calls in each worker: settings come from the environment."""
    _die_with_parent()
    settings = Settings.from_env()
    logs.configure(settings.log_level, settings.access_log)
    tune_allocator()
    return FlagstaffApp(settings)
