"""OpenFeature Remote Evaluation Protocol (OFREP) endpoints, for the generic OFREP providers.

- ``POST /ofrep/v1/evaluate/flags/{key}``: one flag (server providers, once per evaluation);
- ``POST /ofrep/v1/evaluate/flags``: every flag (web providers), with an ``ETag`` (a digest of
  the answer, so it changes exactly when an answer for this context would) and 304 to a
  matching ``If-None-Match``;
- ``GET /ofrep/v1/configuration``: the server's name, value types and polling hint (the
  endpoint of OFREP before 0.2, still read by providers that opt in).

Authorised by the project token as ``Authorization: Bearer <token>`` or ``X-API-Key``. The
evaluation is ``/flags``'s own (:func:`flagstaff.http.flags.compute_flags`: stored persons and
groups, overrides, cohorts, dependencies, GeoIP) and counts as a ``/flags`` request for the
metrics and the flag quota (429 with ``Retry-After`` when over it). A read of one flag is
recorded as ``$feature_flag_called`` for flag usage and experiment exposures, as the PostHog
SDKs send it (:mod:`flagstaff.server.flag_reads`). The PostHog-to-OFREP
mapping is :mod:`flagstaff.flags.ofrep`. Every failure answers ``errorCode`` and
``errorDetails`` (with ``key`` on the single endpoint).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable
from typing import Any

import msgspec

from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import refusal
from flagstaff.flags import FlagResult, ofrep
from flagstaff.http.asgi import Request, Response
from flagstaff.http.flags import (
    FlagsRequest,
    compute_flags,
    count_flag_request,
    project_for_token,
)
from flagstaff.http.ofrep_schemas import OfrepEvaluationRequest
from flagstaff.ops import logs
from flagstaff.server.caches import ProjectFlags
from flagstaff.server.services import Services
from flagstaff.store.base import Project

SINGLE_PREFIX = "/ofrep/v1/evaluate/flags/"
MIN_POLLING_INTERVAL_MS = 1000
"""The shortest poll the configuration advises: a bulk poll costs one /flags call."""

_encode = msgspec.json.encode
_decode = msgspec.json.decode
_EXPOSE = (b"access-control-expose-headers", b"ETag")
_NO_CACHE = (b"cache-control", b"no-cache")


def error(status: int, code: str, detail: str, attr: str | None = None) -> bytes:
    """An error answered around the handlers (405, 413, 500) in OFREP's shape."""
    return _encode(ofrep.failure(None, ofrep.GENERAL, detail))


class _Refused(Exception):
    """An OFREP failure answer."""

    def __init__(
        self, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        super().__init__(body.get("errorDetails"))
        self.status = status
        self.body = body
        self.headers = headers

    def response(self) -> Response:
        return Response(_encode(self.body), self.status, headers=self.headers)


def _token(request: Request) -> str | None:
    headers = request.headers
    authorization = headers.get("authorization")
    if authorization:
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
    return headers.get("x-api-key") or None


async def _project(svc: Services, request: Request, key: str | None) -> Project:
    """The project of the request's token, or 401."""
    token = _token(request)
    if token is None:
        detail = "send the project token as Authorization: Bearer <token> or X-API-Key"
        raise _Refused(401, ofrep.failure(key, ofrep.GENERAL, detail))
    try:
        return await project_for_token(svc, token)
    except ApiError as exc:
        raise _Refused(401, ofrep.failure(key, ofrep.GENERAL, exc.detail)) from None


def _admit(svc: Services, project: Project, key: str | None) -> None:
    """Count the request as a flag request; 429 once the project is over its flag quota."""
    if count_flag_request(svc, project):
        retry = str(60 - int(time.time()) % 60).encode()
        detail = "the project's feature flag quota is exhausted for this minute"
        raise _Refused(429, ofrep.failure(key, ofrep.GENERAL, detail), [(b"retry-after", retry)])


def _context(request: Request, key: str | None) -> ofrep.OfrepContext:
    """The request's evaluation context, or 400 with OFREP's code: ``PARSE_ERROR`` (not a
    JSON object), ``TARGETING_KEY_MISSING``, ``INVALID_CONTEXT``."""
    try:
        body = _decode(request.body or b"null", type=OfrepEvaluationRequest)
        return ofrep.parse_context(body.context)
    except msgspec.ValidationError as exc:
        refused = refusal(exc)
        if refused.code == "required":  # no context
            code, detail = ofrep.TARGETING_KEY_MISSING, "the request has no context.targetingKey"
        elif refused.attr == "context":
            code, detail = ofrep.INVALID_CONTEXT, "context must be an object"
        else:
            code, detail = ofrep.PARSE_ERROR, "the request body must be a JSON object"
    except msgspec.DecodeError as exc:
        code, detail = ofrep.PARSE_ERROR, f"the request body is not JSON: {exc}"
    except ofrep.ContextError as exc:
        code, detail = exc.code, exc.detail
    raise _Refused(400, ofrep.failure(key, code, detail))


def _flags_request(ctx: ofrep.OfrepContext, flag_key: str | None = None) -> FlagsRequest:
    """The ``/flags`` request asking what ``ctx`` asks (``flag_key``: that flag only)."""
    return FlagsRequest(
        distinct_id=ctx.distinct_id,
        groups=ctx.groups,
        person_properties=ctx.person_properties,
        flag_keys_to_evaluate=[flag_key] if flag_key is not None else None,
    )


async def _guarded(key: str | None, answer: Awaitable[Response]) -> Response:
    """``answer`` (a coroutine) as a response; refusals and errors in OFREP's shape."""
    try:
        return await answer
    except _Refused as refused:
        return refused.response()
    except ApiError as exc:
        return Response(_encode(ofrep.failure(key, ofrep.GENERAL, exc.detail)), exc.status)
    except Exception:
        logs.logger.exception("OFREP evaluation failed")
        detail = "the server failed to evaluate the flags"
        return Response(_encode(ofrep.failure(key, ofrep.GENERAL, detail)), 500)


async def _evaluate_one(svc: Services, request: Request, key: str) -> Response:
    project = await _project(svc, request, key)
    _admit(svc, project, key)
    ctx = _context(request, key)
    pf = await svc.definitions.get(project.id)
    flag = pf.compiled.flag(key)
    if flag is None:
        detail = f"no flag has the key {key!r}"
        return Response(_encode(ofrep.failure(key, ofrep.FLAG_NOT_FOUND, detail)), 404)
    if not flag.active:
        await _record_read(svc, project, ctx, key, False)
        return Response(_encode(ofrep.disabled(key)))
    results, errors, _ = await compute_flags(svc, request, _flags_request(ctx, key), project, pf)
    if errors:
        svc.metrics.flag_errors += 1
    for result in results:
        if result.key == key:
            break
    else:
        detail = (
            f"the flag {key!r} is not evaluated here: its evaluation runtime or contexts "
            "exclude this request, or it is part of a dependency cycle"
        )
        return Response(_encode(ofrep.failure(key, ofrep.FLAG_NOT_FOUND, detail)), 404)
    if result.failed:
        return Response(_encode(ofrep.failure(key, ofrep.GENERAL, ofrep.FAILED_DETAIL)), 500)
    await _record_read(svc, project, ctx, key, ofrep.value_of(result))
    return Response(_item(result, pf))


async def _record_read(
    svc: Services, project: Project, ctx: ofrep.OfrepContext, key: str, value: bool | str
) -> None:
    """A read of one flag counts for flag usage and exposures (``server/flag_reads.py``)."""
    svc.metrics.events_ingested += await svc.flag_reads.record(project, ctx.distinct_id, key, value)


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    for tag in if_none_match.split(","):
        tag = tag.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False


_INACTIVE = 0
"""The key of the inactive flags' items in ``ofrep_fragments.by_id`` (no object's id is 0)."""


def _item(result: FlagResult, pf: ProjectFlags) -> bytes:
    """A result's OFREP JSON, encoded once per definitions version: as /flags' fragments, by
    the result's identity (the engine shares one result object per outcome, and
    ``ofrep_fragments`` keeps each alive, so no other object can have its id meanwhile)."""
    fragments = pf.ofrep_fragments
    part = fragments.by_id.get(id(result))
    if part is None:
        part = _encode(ofrep.evaluation(result, pf.compiled))
        if not result.failed:  # a failed result is a copy made for this request
            if len(fragments.by_id) > 50_000:
                fragments.clear()
            fragments.by_id[id(result)] = part
            fragments.owners.append(result)
    return part


def _bulk_body(results: list[FlagResult], pf: ProjectFlags) -> bytes:
    """``{"flags": [...]}``: every result, then the inactive flags as DISABLED."""
    by_id = pf.ofrep_fragments.by_id
    inactive = by_id.get(_INACTIVE)
    if inactive is None:
        inactive = by_id[_INACTIVE] = b"".join(
            b"," + _encode(ofrep.disabled(key)) for key in pf.compiled.inactive_keys
        )
    if not results:
        return b'{"flags":[' + inactive[1:] + b"]}"
    parts = [_item(r, pf) for r in results]
    return b"".join([b'{"flags":[', b",".join(parts), inactive, b"]}"])


async def _evaluate_all(svc: Services, request: Request) -> Response:
    project = await _project(svc, request, None)
    _admit(svc, project, None)
    ctx = _context(request, None)
    pf = await svc.definitions.get(project.id)
    results, errors, _ = await compute_flags(svc, request, _flags_request(ctx), project, pf)
    if errors:
        svc.metrics.flag_errors += 1
    body = _bulk_body(results, pf)
    etag = f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'
    headers = [(b"etag", etag.encode()), _NO_CACHE, _EXPOSE]
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(b"", 304, headers=headers)
    return Response(body, headers=headers)


async def evaluate_flag_endpoint(svc: Services, request: Request) -> Response:
    """POST /ofrep/v1/evaluate/flags/{key}."""
    key = request.path.rstrip("/")[len(SINGLE_PREFIX) :]
    if not key or "/" in key:
        detail = "no such route: POST /ofrep/v1/evaluate/flags/{key}"
        return Response(_encode(ofrep.failure(key, ofrep.FLAG_NOT_FOUND, detail)), 404)
    return await _guarded(key, _evaluate_one(svc, request, key))


async def evaluate_flags_endpoint(svc: Services, request: Request) -> Response:
    """POST /ofrep/v1/evaluate/flags."""
    return await _guarded(None, _evaluate_all(svc, request))


CONFIGURATION = {
    "name": "Flagstaff",
    "capabilities": {
        "cacheInvalidation": {
            "polling": {"enabled": True, "minPollingIntervalMs": MIN_POLLING_INTERVAL_MS}
        },
        "flagEvaluation": {"supportedTypes": ["boolean", "string"]},
    },
}
_CONFIGURATION_BODY = _encode(CONFIGURATION)
_CONFIGURATION_ETAG = f'"{hashlib.blake2b(_CONFIGURATION_BODY, digest_size=12).hexdigest()}"'


async def _configuration(svc: Services, request: Request) -> Response:
    await _project(svc, request, None)
    headers = [(b"etag", _CONFIGURATION_ETAG.encode()), _NO_CACHE, _EXPOSE]
    if _matches(request.headers.get("if-none-match"), _CONFIGURATION_ETAG):
        return Response(b"", 304, headers=headers)
    return Response(_CONFIGURATION_BODY, headers=headers)


async def configuration_endpoint(svc: Services, request: Request) -> Response:
    """GET /ofrep/v1/configuration."""
    return await _guarded(None, _configuration(svc, request))
