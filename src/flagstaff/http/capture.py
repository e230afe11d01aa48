"""Capture endpoints: /e, /i/v0/e, /capture, /batch, /track, /engage, /s.

The data flow of one request: decode the body (any SDK encoding, size-limited), find the
project token and the events, normalise and validate each event (pure rules), then hand the
batch to ``svc.ingest``: the store, which commits events, person and group changes and
warnings in one group-committed transaction, or, with a stream configured, the publisher,
which queues them in a replicated JetStream stream (:mod:`flagstaff.stream`). The 200 is sent
only after that commit or that acknowledgement.
"""

from __future__ import annotations

from typing import Any

from flagstaff.application.errors import ApiError
from flagstaff.common import clock
from flagstaff.http.asgi import Request, Response
from flagstaff.http.payload import PayloadError, decode_body, decode_query_data
from flagstaff.ingest.model import Drop, Event
from flagstaff.ingest.normalize import TokenError, client_ip, normalize_batch, parse_envelope
from flagstaff.ops import logs
from flagstaff.server.disk import MB
from flagstaff.server.outage import OUTAGE
from flagstaff.server.services import Services
from flagstaff.stream.errors import StreamUnavailable

_OK = b'{"status":1}'


def _payload(svc: Services, request: Request) -> Any:
    limit = svc.settings.body_limit
    try:
        if request.method == "GET" or not request.body:
            data = decode_query_data(request.query, limit)
            if data is not None:
                return data
            if request.method == "GET":
                raise ApiError(400, "no_data", "send the events in the body or as ?data=")
        headers = request.headers
        return decode_body(
            request.body,
            content_type=headers.get("content-type"),
            content_encoding=headers.get("content-encoding"),
            query=request.query,
            limit=limit,
        )
    except PayloadError as exc:
        raise ApiError(exc.status, exc.code, exc.detail) from None


def _over_quota(events: list[Event], allowed: int) -> tuple[list[Event], list[Drop]]:
    kept, excess = events[:allowed], events[allowed:]
    detail = "the project's realtime event quota is exhausted for this minute"
    drops = [Drop.of(e, "event_quota_exceeded", detail) for e in excess]
    return kept, drops


def _refuse_when_disk_low(svc: Services) -> None:
    """503 while the data volume's free space is below its reserve (``server/disk.py``)."""
    if svc.disk.low():
        svc.metrics.count_refusal("disk_reserve")
        status = svc.disk.status()
        detail = (
            "free disk space on the server is below its reserve: the events were not stored, "
            "retry later"
        )
        if status is not None:
            detail += (
                f" ({status.free_bytes // MB} MB free, {status.reserve_bytes // MB} MB reserved)"
            )
        raise ApiError(503, "insufficient_storage", detail)


async def capture_endpoint(svc: Services, request: Request) -> Response:
    _refuse_when_disk_low(svc)
    payload = _payload(svc, request)
    try:
        envelope = parse_envelope(payload, request.query)
    except TokenError as exc:
        raise ApiError(401, exc.code, exc.detail) from None
    project = await svc.projects.by_token(envelope.token)
    if project is None:
        raise ApiError(401, "invalid_api_key", "no project has this token")

    ip = client_ip(
        request.forwarded_for, request.peer, trust_forwarded=svc.settings.trust_forwarded_for
    )
    geoip = svc.geoip_lookup if svc.geoip is not None else None
    now_ms = clock.now_ms()
    events, drops = normalize_batch(envelope, now_ms=now_ms, ip=ip, geoip=geoip)

    if events and not envelope.historical:
        allowed = svc.quotas.events_allowed(project.id, len(events))
        if allowed < len(events):
            events, excess = _over_quota(events, allowed)
            drops.extend(excess)

    if events or drops:
        try:
            outcome = await svc.ingest(project.id, events, drops)
        except StreamUnavailable as exc:
            logs.logger.warning("stream publish failed: %s", exc)
            raise ApiError(503, "stream_unavailable", "the events were not queued, retry") from None
        # A storage failure propagates: app._answer maps it to 503 (flagstaff.http.unavailable).
        if OUTAGE.down:
            OUTAGE.recovered()
        metrics = svc.metrics
        metrics.events_ingested += outcome.ingested
        metrics.events_duplicate += outcome.duplicates
        if outcome.dropped:
            metrics.count_drops(outcome.dropped)

    if request.query.get("beacon") == "1":
        return Response(b"", 204, content_type=b"text/plain")
    return Response(_OK)
