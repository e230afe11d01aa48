"""Operations endpoints: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from flagstaff.http.asgi import Request, Response, json_response
from flagstaff.ops.metrics import render
from flagstaff.server.disk import disk_gauges
from flagstaff.server.services import Services

_OK = b'{"status":"ok"}'


async def health(svc: Services, request: Request) -> Response:
    return Response(_OK)


async def ready(svc: Services, request: Request) -> Response:
    """200 while this node can serve ingestion; else 503 with every reason (the ``checks`` of
    :class:`~flagstaff.server.readiness.Readiness`) and the first one as ``detail``."""
    reasons = await svc.readiness.reasons()
    if not reasons:
        return Response(_OK)
    return json_response(
        {"status": "unavailable", "detail": reasons[0].detail, "reasons": reasons}, 503
    )


async def metrics(svc: Services, request: Request) -> Response:
    text = render([svc.metrics.snapshot(), *svc.metrics_files.others()])
    text += disk_gauges(svc.disk)
    return Response(text.encode(), content_type=b"text/plain; version=0.0.4; charset=utf-8")
