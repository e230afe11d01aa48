"""Operations endpoints: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from flagstaff.http.asgi import Request, Response, json_response
from flagstaff.ops.metrics import render
from flagstaff.server.disk import disk_gauges, reserve_reason
from flagstaff.server.services import Services

_OK = b'{"status":"ok"}'


async def health(svc: Services, request: Request) -> Response:
    return Response(_OK)


async def ready(svc: Services, request: Request) -> Response:
    if not await svc.store.ping():
        return json_response({"status": "unavailable", "detail": "the store is not reachable"}, 503)
    reason = reserve_reason(svc.disk)
    if reason is not None:
        return json_response({"status": "unavailable", "detail": reason}, 503)
    return Response(_OK)


async def metrics(svc: Services, request: Request) -> Response:
    text = render([svc.metrics.snapshot(), *svc.metrics_files.others()])
    text += disk_gauges(svc.disk)
    return Response(text.encode(), content_type=b"text/plain; version=0.0.4; charset=utf-8")
