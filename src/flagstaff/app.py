"""Builds the ASGI application: hot public routes on a thin dispatcher, /api/ on starlette.

Public routes (flags, capture, operations) are found by one dict look-up on the path without
its trailing slash; everything else goes to the starlette management app.
"""

from __future__ import annotations

import ctypes
import logging
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from flagstaff import logs
from flagstaff.config import Settings
from flagstaff.http import capture, flags, ops, products, static
from flagstaff.http.admin import ROUTES, build_admin
from flagstaff.http.asgi import (
    Receive,
    Request,
    Response,
    Scope,
    Send,
    cors_headers,
    read_body,
    send_response,
)
from flagstaff.http.auth import personal_key_auth
from flagstaff.http.docs import docs_routes
from flagstaff.http.errors import ApiError, error_body
from flagstaff.http.limits import RETRY_AFTER_SECONDS, BodyReaders, MemoryBudget
from flagstaff.http.openapi import openapi_document, schema_route
from flagstaff.services import Services

Handler = Callable[[Services, Request], Awaitable[Response]]


class PublicRoute:
    __slots__ = ("cors", "handler", "methods", "name")

    def __init__(self, name: str, handler: Handler, methods: frozenset[str], cors: bool) -> None:
        self.name = name
        self.handler = handler
        self.methods = methods
        self.cors = cors


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
    }
    for path, handler in (
        ("/api/web_experiments", products.web_experiments_endpoint),
        ("/api/product_tours", products.product_tours_endpoint),
    ):
        routes[path] = PublicRoute(path, handler, _GET, True)
    for path in ("/e", "/i/v0/e", "/capture", "/batch", "/track", "/engage", "/s"):
        routes[path] = PublicRoute(path, capture.capture_endpoint, _CAPTURE, True)
    return routes


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing; any other request to the management API that is not refused
with a 4xx bumps the node's change counter."""

_ARRAY = PublicRoute("/array/{token}/config", flags.array_config_endpoint, _GET, True)
_STATIC = PublicRoute("/static/{name}", static.static_endpoint, _GET, True)
_REMOTE_CONFIG = PublicRoute(
    "/api/projects/{id}/feature_flags/{key}/remote_config", flags.remote_config_endpoint, _GET, True
)
PATTERN_ROUTES = (_ARRAY, _STATIC, _REMOTE_CONFIG)
"""Public routes found by a path prefix rather than the dict look-up."""


_RETRY_AFTER = [(b"retry-after", str(RETRY_AFTER_SECONDS).encode())]


def _content_length(scope: Scope) -> int:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


class FlagstaffApp:
    def __init__(self, settings: Settings, services: Services | None = None) -> None:
        self.settings = settings
        self.services = services or Services(settings)
        self.routes = public_routes()
        document = openapi_document(ROUTES, [*self.routes.values(), *PATTERN_ROUTES])
        self.admin = build_admin(
            self.services.store,
            personal_key_auth(self.services.store),
            [schema_route(document), *docs_routes()],
        )
        self._body_limit = settings.body_limit
        # One boolean per request when off: the access log costs nothing unless asked for.
        self._access_log = settings.access_log or settings.log_level == "debug"
        self.readers = BodyReaders(settings.body_timeout_seconds, settings.max_requests // 2)
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
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        route = self._route_for(scope["path"])
        svc = self.services
        if route is None:
            status = await self._admin(scope, receive, send)
            elapsed = time.perf_counter() - started
            svc.metrics.observe_request("/api", status, elapsed)
            if self._access_log:
                _log_access(scope, status, elapsed)
            return
        method = scope["method"]
        extra = cors_headers(scope) if route.cors else []
        if method == "OPTIONS" and route.cors:
            response = Response(b"", 200, content_type=b"text/plain")
        elif method not in route.methods:
            response = Response(
                error_body(405, "method_not_allowed", f"{method} is not allowed here"), 405
            )
        else:
            cost = 0
            try:
                body = b""
                if method == "POST":
                    declared = _content_length(scope)
                    if declared > self._body_limit:
                        raise ApiError(
                            413,
                            "payload_too_large",
                            f"the request body is larger than {self._body_limit} bytes",
                        )
                    cost = self.budget.admit(declared)
                    body = await read_body(receive, self._body_limit, self.readers)
                    if not cost:
                        cost = self.budget.admit(len(body))
                response = await route.handler(svc, Request(scope, body))
            except ApiError as exc:
                retry = _RETRY_AFTER if exc.status == 503 else None
                response = Response(exc.body(), exc.status, headers=retry)
            except Exception:
                logs.logger.exception("unhandled error on %s", scope["path"])
                response = Response(
                    error_body(500, "server_error", "the server failed to answer"), 500
                )
            finally:
                self.budget.release(cost)
        await send_response(send, response, extra)
        elapsed = time.perf_counter() - started
        svc.metrics.observe_request(route.name, response.status, elapsed)
        if response.status >= 500:
            logs.log(logging.ERROR, "request failed", path=scope["path"], status=response.status)
        if self._access_log:
            _log_access(scope, response.status, elapsed)

    async def _admin(self, scope: Scope, receive: Receive, send: Send) -> int:
        status = 500
        writes = scope["method"] not in _SAFE_METHODS
        changes = self.services.changes

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if writes and not 400 <= status < 500:
                    # Before the answer leaves: whoever sees it, then asks any worker, is
                    # answered from the changed data. A refused request (401, 404, invalid
                    # input) wrote nothing; after a 500 nobody knows, so it bumps too.
                    changes.bump()
            await send(message)

        await self.admin(scope, receive, tracking_send)
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
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.services.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _request_id(scope: Scope) -> str:
    """The client's ``X-Request-Id`` (up to 200 characters), else a new random one."""
    for name, value in scope["headers"]:
        if name == b"x-request-id" and 0 < len(value) <= 200:
            return value.decode("latin-1")
    return secrets.token_hex(8)


def _log_access(scope: Scope, status: int, elapsed: float) -> None:
    logs.access(
        scope["method"], scope["path"], status, round(elapsed * 1000, 3), _request_id(scope)
    )


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
    return FlagstaffApp(settings)
