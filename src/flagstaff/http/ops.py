"""Operations endpoints: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from flagstaff.http.asgi import Request, Response, json_response
from flagstaff.ops.metrics import render
from flagstaff.server.services import Services

_OK = b'{"status":"ok"}'


async def health(svc: Services, request: Request) -> Response:
    return Response(_OK)


async def ready(svc: Services, request: Request) -> Response:
    if svc.stream is not None:
        # Capture through the stream works while the database is down: the node stays ready
        # for events as long as the stream is reachable.
        store = "ok" if await svc.store.ping() else "unavailable"
        if svc.stream.connected:
            return json_response({"status": "ok", "store": store, "stream": "ok"})
        detail = "the event stream is not reachable"
        return json_response({"status": "unavailable", "store": store, "detail": detail}, 503)
    if await svc.store.ping():
        return Response(_OK)
    return json_response({"status": "unavailable", "detail": "the store is not reachable"}, 503)


async def metrics(svc: Services, request: Request) -> Response:
    text = render([svc.metrics.snapshot(), *svc.metrics_files.others()])
    return Response(text.encode(), content_type=b"text/plain; version=0.0.4; charset=utf-8")
