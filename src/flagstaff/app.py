"""Builds the ASGI application: hot public routes on a thin dispatcher, /api/ on starlette.

Public routes (flags, capture, operations) are found by one dict look-up on the path without
its trailing slash; everything else goes to the starlette management app.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from flagstaff import logs
from flagstaff.config import Settings
from flagstaff.http import capture, flags, ops, rsgi
from flagstaff.http.admin import build_admin
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
from flagstaff.http.errors import ApiError, error_body
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
    for path in ("/e", "/i/v0/e", "/capture", "/batch", "/track", "/engage", "/s"):
        routes[path] = PublicRoute(path, capture.capture_endpoint, _CAPTURE, True)
    return routes


_RSGI_JSON = [("content-type", "application/json")]
_ARRAY = PublicRoute("/array/{token}/config", flags.array_config_endpoint, _GET, True)
_REMOTE_CONFIG = PublicRoute(
    "/api/projects/{id}/feature_flags/{key}/remote_config", flags.remote_config_endpoint, _GET, True
)


class FlagstaffApp:
    def __init__(self, settings: Settings, services: Services | None = None) -> None:
        self.settings = settings
        self.services = services or Services(settings)
        self.routes = public_routes()
        self.admin = build_admin(self.services.store, personal_key_auth(self.services.store), [])
        self._body_limit = settings.body_limit

    def _route_for(self, path: str) -> PublicRoute | None:
        key = path.rstrip("/") or "/"
        route = self.routes.get(key)
        if route is not None:
            return route
        if key.startswith("/array/"):
            return _ARRAY
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
            svc.metrics.observe_request("/api", status, time.perf_counter() - started)
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
            try:
                body = await read_body(receive, self._body_limit) if method == "POST" else b""
                response = await route.handler(svc, Request(scope, body))
            except ApiError as exc:
                response = Response(exc.body(), exc.status)
            except Exception:
                logs.logger.exception("unhandled error on %s", scope["path"])
                response = Response(
                    error_body(500, "server_error", "the server failed to answer"), 500
                )
        await send_response(send, response, extra)
        elapsed = time.perf_counter() - started
        svc.metrics.observe_request(route.name, response.status, elapsed)
        if response.status >= 500:
            logs.log(logging.ERROR, "request failed", path=scope["path"], status=response.status)
        elif logs.logger.isEnabledFor(logging.DEBUG):
            logs.log(
                logging.DEBUG,
                "request",
                method=method,
                path=scope["path"],
                status=response.status,
                ms=round(elapsed * 1000, 3),
            )

    # RSGI (granian's native interface): what `flagstaff serve` runs ---------------------------

    def __rsgi_init__(self, loop: Any) -> None:
        loop.run_until_complete(self.services.start())

    def __rsgi_del__(self, loop: Any) -> None:
        loop.run_until_complete(self.services.stop())

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        started = time.perf_counter()
        path = scope.path
        route = self._route_for(path)
        svc = self.services
        method = scope.method
        if route is None:
            try:
                body = await rsgi.read_body(scope, protocol, self._body_limit)
            except ApiError as exc:
                protocol.response_bytes(exc.status, _RSGI_JSON, exc.body())
                return
            status = await rsgi.call_asgi(self.admin, scope, protocol, body)
            svc.metrics.observe_request("/api", status, time.perf_counter() - started)
            return
        extra = rsgi.cors_headers(scope) if route.cors else []
        if method == "OPTIONS" and route.cors:
            response = Response(b"", 200, content_type=b"text/plain")
        elif method not in route.methods:
            response = Response(
                error_body(405, "method_not_allowed", f"{method} is not allowed here"), 405
            )
        else:
            try:
                body = (
                    await rsgi.read_body(scope, protocol, self._body_limit)
                    if method == "POST"
                    else b""
                )
                response = await route.handler(svc, rsgi.RsgiRequest(scope, body))  # type: ignore[arg-type]
            except ApiError as exc:
                response = Response(exc.body(), exc.status)
            except Exception:
                logs.logger.exception("unhandled error on %s", path)
                response = Response(
                    error_body(500, "server_error", "the server failed to answer"), 500
                )
        headers = [("content-type", response.content_type.decode("latin-1")), *extra]
        if response.headers:
            headers.extend((k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers)
        protocol.response_bytes(response.status, headers, response.body)
        elapsed = time.perf_counter() - started
        svc.metrics.observe_request(route.name, response.status, elapsed)
        if response.status >= 500:
            logs.log(logging.ERROR, "request failed", path=path, status=response.status)

    async def _admin(self, scope: Scope, receive: Receive, send: Send) -> int:
        status = 500

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
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
    logs.configure(settings.log_level)
    return FlagstaffApp(settings)
