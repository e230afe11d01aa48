"""Flag endpoints: /flags and /decide, SDK definitions, remote config, posthog-js config.

The data flow of one /flags request: decode the body, resolve the project from its token,
fetch the compiled definitions (cached per version) and the stored person/groups (one indexed
look-up each), overlay the request's properties, evaluate, encode.

:func:`project_for_token` (the project of a public request's token, or 401) serves the product
lists of ``products.py`` too.
"""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple

import msgspec
import uuid_utils
from msgspec import Meta, field

from flagstaff.accounts.keys import check_project_token
from flagstaff.application.errors import ApiError
from flagstaff.common import clock
from flagstaff.flags import EvalRequest, FlagResult, detect_runtime, evaluate_checked
from flagstaff.flags.dates import CLOCK
from flagstaff.flags.request import group_keys, group_properties_for, person_properties_for
from flagstaff.http.asgi import Request, Response
from flagstaff.http.auth import check_personal_key
from flagstaff.http.payload import PayloadError, body_json, decode_as, parse_json
from flagstaff.ingest.normalize import MAX_DISTINCT_ID_LENGTH, client_ip
from flagstaff.ops import logs
from flagstaff.server.caches import Fragments, ProjectFlags
from flagstaff.server.outage import OUTAGE
from flagstaff.server.services import Services
from flagstaff.store.base import FlagContext, Project
from flagstaff.store.faults import is_unavailable

_encode = msgspec.json.encode
_CLIENT_HEADERS = frozenset(("origin", "referer", "sec-fetch-mode", "sec-fetch-site"))
SUPPORTED_COMPRESSION = ["gzip", "gzip-js", "lz64"]


_Token = Annotated[
    Any,
    Meta(
        extra_json_schema={"type": "string"},
        description="the project token (api_key, else token, else $token)",
    ),
]
_Text = Annotated[Any, Meta(extra_json_schema={"type": "string"})]
_Flag = Annotated[Any, Meta(extra_json_schema={"type": "boolean"})]
_Keys = Annotated[list[Any], Meta(extra_json_schema={"items": {"type": "string"}})]


class FlagsRequest(msgspec.Struct):
    """The body of POST /flags and /decide (JSON, or compressed/base64/form-encoded as the
    SDKs send it). Decoded straight from the request's bytes; unknown fields are ignored.

    As PostHog does, ``distinct_id`` may be a number (its text is the id) and is required
    unless the flags are not evaluated (``disable_flags``, over quota); a group key may be a
    number; the optional fields typed loosely are read only when they have the right type
    (``$anon_distinct_id``, the device id, ``evaluation_runtime`` as text, ``disable_flags``
    and ``geoip_disable`` when ``true``)."""

    distinct_id: Annotated[
        str | int | float | None,
        Meta(description="required; cut to 200 characters; a number stands for its text"),
    ] = None
    api_key: _Token = None
    token: _Token = None
    dollar_token: _Token = field(default=None, name="$token")
    anon_distinct_id: _Text = field(default=None, name="$anon_distinct_id")
    device_id: _Text = None
    dollar_device_id: _Text = field(default=None, name="$device_id")
    groups: Annotated[
        dict[str, Any] | None,
        Meta(description="group type to key (a string or a number; any other value is ignored)"),
    ] = None
    person_properties: dict[str, Any] | None = None
    group_properties: Annotated[
        dict[str, Any] | None, Meta(description="group type to its properties")
    ] = None
    flag_keys_to_evaluate: _Keys | None = None
    flag_keys: Annotated[
        Any, Meta(extra_json_schema={"type": "array", "items": {"type": "string"}})
    ] = None
    """``flag_keys_to_evaluate``'s older name: read (and checked) only without it."""
    evaluation_contexts: _Keys | None = None
    evaluation_environments: Annotated[
        Any, Meta(extra_json_schema={"type": "array", "items": {"type": "string"}})
    ] = None
    """``evaluation_contexts``' older name: read (and checked) only without it."""
    evaluation_runtime: _Text = None
    disable_flags: _Flag = None
    geoip_disable: _Flag = None
    timezone: _Text = None


_MISSING_DISTINCT_ID = ApiError(
    400, "missing_distinct_id", "distinct_id is required", "distinct_id"
)
_CHECKED = (
    "distinct_id",
    "groups",
    "person_properties",
    "group_properties",
    "flag_keys_to_evaluate",
    "evaluation_contexts",
)
"""The fields a body can get wrong, in the order their refusals take precedence."""
_OLDER_NAMES = {
    "flag_keys_to_evaluate": "flag_keys",
    "evaluation_contexts": "evaluation_environments",
}


def _refusal(name: str, value: Any) -> ApiError:
    """The answer to a field of the wrong type (PostHog's codes for the distinct id)."""
    if name == "distinct_id":
        if isinstance(value, bool):
            return _MISSING_DISTINCT_ID
        return ApiError(400, "invalid_distinct_id", "distinct_id must be a string", name)
    if name.endswith("properties") or name == "groups":
        return ApiError(400, "invalid_input", f"{name} must be an object", name)
    return ApiError(400, "invalid_input", f"{name} must be a list of strings", name)


def _refused(raw: bytes) -> tuple[FlagsRequest, ApiError]:
    """A body that does not fit :class:`FlagsRequest`: its token fields (still answered first:
    401 for a bad token, nothing to refuse when the flags are not evaluated) and the refusal
    of its first wrong field."""
    value = parse_json(raw)
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_payload", "the flag request must be a JSON object")
    envelope = {k: value[k] for k in ("api_key", "token", "$token", "disable_flags") if k in value}
    body = msgspec.convert(envelope, FlagsRequest)
    if value.get("distinct_id") is None:
        return body, _MISSING_DISTINCT_ID
    for name in _CHECKED:
        if name in _OLDER_NAMES and value.get(name) is None:
            name = _OLDER_NAMES[name]
            if value.get(name) is not None and not isinstance(value[name], list):
                return body, _refusal(name, value[name])
        elif name in value:
            try:
                msgspec.convert({name: value[name]}, FlagsRequest)
            except msgspec.ValidationError:
                return body, _refusal(name, value[name])
    return body, ApiError(400, "invalid_input", "the flag request is not valid")


def _decode_request(svc: Services, request: Request) -> tuple[FlagsRequest, ApiError | None]:
    """The request's body, and the refusal to answer if its flags are evaluated."""
    if request.method == "GET":
        raise ApiError(405, "method_not_allowed", "send the flag request as a POST")
    headers = request.headers
    try:
        raw = body_json(
            request.body,
            content_type=headers.get("content-type"),
            content_encoding=headers.get("content-encoding"),
            query=request.query,
            limit=svc.settings.body_limit,
        )
        try:
            return decode_as(raw, FlagsRequest), None
        except msgspec.ValidationError:
            return _refused(raw)
    except PayloadError as exc:
        raise ApiError(exc.status, exc.code, exc.detail) from None


async def project_for_token(svc: Services, token: Any) -> Project:
    """The project whose token this is, or 401 as PostHog answers."""
    if not isinstance(token, str):
        raise ApiError(
            401,
            "invalid_api_key",
            "send the project token as api_key (or token) in the body",
        )
    problem = check_project_token(token)
    if problem is not None:
        raise ApiError(401, "invalid_api_key", problem)
    project = await svc.projects.by_token(token)
    if project is None:
        raise ApiError(401, "invalid_api_key", "no project has this token")
    return project


def count_flag_request(svc: Services, project: Project) -> bool:
    """Count one flag request (metrics, the project's flag quota); True when it is over
    the quota. Every flag-evaluating endpoint (/flags, /decide, OFREP) counts this way."""
    svc.metrics.flag_requests += 1
    return svc.quotas.flags_exceeded(project.id)


def _distinct_id(body: FlagsRequest) -> str:
    """The request's distinct id, cut to 200 characters. An empty one is answered (as
    PostHog does: it hashes to 0.0); only a missing one is refused."""
    raw = body.distinct_id
    if raw is None:
        raise _MISSING_DISTINCT_ID
    if type(raw) is not str:
        raw = str(raw)
    return raw[:MAX_DISTINCT_ID_LENGTH]


def _string_list(value: list[Any] | None, older: Any, older_name: str) -> list[str] | None:
    """A list of names as text, from its field or else from its older name's."""
    if value is None:
        if older is None:
            return None
        if not isinstance(older, list):
            raise _refusal(older_name, older)
        value = older
    return [str(v) for v in value]


def _geoip_ip(svc: Services, request: Request, body: FlagsRequest) -> str | None:
    """The client IP whose GeoIP properties the request gets, or None (none, or GeoIP off)."""
    if svc.geoip is None or body.geoip_disable is True:
        return None
    return client_ip(
        request.forwarded_for, request.peer, trust_forwarded=svc.settings.trust_forwarded_for
    )


def _geoip_properties(svc: Services, ip: str | None) -> dict[str, Any]:
    return svc.geoip.lookup(ip) if ip and svc.geoip is not None else {}


async def _context(
    svc: Services, project: Project, pf: ProjectFlags, distinct_id: str, groups: dict[str, str]
) -> FlagContext | None:
    """The stored person and groups behind the request; None when the store failed."""
    indexes = {}
    for name, key in groups.items():
        index = pf.group_type_index.get(name)
        if index is not None:
            indexes[index] = key
    compiled = pf.compiled
    try:
        return await svc.store.flag_context(
            project.id,
            distinct_id,
            indexes,
            overrides=bool(compiled.continuity_flag_keys),
            static_cohorts=compiled.uses_static_cohorts,
        )
    except Exception as exc:
        if is_unavailable(exc):
            OUTAGE.failed(exc, "/flags")  # logged once per outage, not once per request
        else:
            logs.logger.exception("reading stored flag context failed")
        return None


async def _continuity_overrides(
    svc: Services,
    project: Project,
    ctx: FlagContext,
    distinct_id: str,
    anon: str,
    continuity: frozenset[str],
) -> dict[str, str]:
    """Store ``anon`` as the hash key of every continuity flag, on the persons behind both
    ``distinct_id`` and ``anon`` (whichever exist, first value wins), and return the
    overrides that apply now: the distinct_id person's, else the anonymous person's.

    As PostHog does: the anonymous person usually exists before the identified one (the
    /flags call after identify() can arrive before the $identify event is ingested).
    """
    sources = [(distinct_id, ctx)]
    if anon != distinct_id:
        anon_ctx = await svc.store.flag_context(project.id, anon, {}, overrides=True)
        if anon_ctx.person_id is not None and anon_ctx.person_id != ctx.person_id:
            sources.insert(0, (anon, anon_ctx))
    merged: dict[str, str] = {}
    for owner, owner_ctx in sources:
        if owner_ctx.person_id is None:
            continue
        stored = owner_ctx.hash_key_overrides
        missing = [k for k in continuity if k not in stored]
        if missing:
            await svc.store.add_hash_key_overrides(project.id, owner, anon, missing)
        merged.update({k: anon for k in missing})
        merged.update(stored)
    return merged


async def _overrides_for(
    svc: Services,
    project: Project,
    pf: ProjectFlags,
    ctx: FlagContext,
    body: FlagsRequest,
    distinct_id: str,
) -> tuple[dict[str, str], bool]:
    """The hash-key overrides of the experience-continuity flags (stored first when the
    request carries ``$anon_distinct_id``), and whether storing them failed."""
    anon = body.anon_distinct_id
    continuity = pf.compiled.continuity_flag_keys
    overrides = ctx.hash_key_overrides
    failed = False
    if continuity and isinstance(anon, str) and anon:
        try:
            overrides = await _continuity_overrides(
                svc, project, ctx, distinct_id, anon[:MAX_DISTINCT_ID_LENGTH], continuity
            )
        except Exception:
            logs.logger.exception("storing hash key overrides failed")
            failed = True
    if overrides and not continuity.issuperset(overrides):
        overrides = {k: v for k, v in overrides.items() if k in continuity}
    return overrides, failed


def _runtime(request: Request, body: FlagsRequest) -> str | None:
    headers = request.headers
    explicit = body.evaluation_runtime
    return detect_runtime(
        explicit if isinstance(explicit, str) else None,
        headers.get("user-agent"),
        not headers.keys().isdisjoint(_CLIENT_HEADERS),
    )


class Inputs(NamedTuple):
    """What a request's answer takes from its headers and connection."""

    runtime: str | None
    """The evaluation runtime detected from the headers (or named in the body)."""
    ip: str | None
    """The client IP whose GeoIP properties fill gaps, when GeoIP is on."""


def request_inputs(svc: Services, request: Request, body: FlagsRequest) -> Inputs:
    return Inputs(_runtime(request, body), _geoip_ip(svc, request, body))


class Computed(NamedTuple):
    """The flags of one request, evaluated."""

    results: list[FlagResult]
    errors: bool
    """Some could not be computed (store unreachable, a dependency cycle, a failed flag)."""
    reads_clock: bool
    """The evaluation compared against the current time (a relative date)."""


async def compute_flags(
    svc: Services,
    request: Request,
    body: FlagsRequest,
    project: Project,
    pf: ProjectFlags,
    inputs: Inputs | None = None,
) -> Computed:
    """Evaluate every flag the request asks for (``inputs`` when the caller has them)."""
    if inputs is None:
        inputs = request_inputs(svc, request, body)
    distinct_id = _distinct_id(body)
    requested_groups = body.groups or {}
    groups = group_keys(requested_groups)
    ctx = await _context(svc, project, pf, distinct_id, groups)
    store_failed = ctx is None
    if ctx is None:
        ctx = FlagContext({}, {}, {}, frozenset(), None)
        overrides: dict[str, str] = {}
    else:
        overrides, store_failed = await _overrides_for(svc, project, pf, ctx, body, distinct_id)
    device_id = body.device_id or body.dollar_device_id
    eval_request = EvalRequest(
        distinct_id=distinct_id,
        person_properties=person_properties_for(
            ctx.person_properties,
            _geoip_properties(svc, inputs.ip),
            body.person_properties or {},
        ),
        groups=groups,
        group_properties=group_properties_for(
            requested_groups,
            pf.group_type_index,
            ctx.group_properties,
            body.group_properties or {},
        ),
        device_id=device_id if isinstance(device_id, str) else None,
        hash_key_overrides=overrides,
        static_cohort_ids=ctx.static_cohort_ids,
        flag_keys=_string_list(body.flag_keys_to_evaluate, body.flag_keys, "flag_keys"),
        runtime=inputs.runtime,
        contexts=_string_list(
            body.evaluation_contexts, body.evaluation_environments, "evaluation_environments"
        ),
    )
    clock = CLOCK.count
    results, failed = evaluate_checked(pf.compiled, eval_request)
    reads_clock = CLOCK.count != clock  # evaluation is synchronous: only this request counted
    if store_failed:
        results = [_failed_if_stored(r, pf) for r in results]
    svc.metrics.flag_evaluations += len(results)
    return Computed(
        results, store_failed or failed or pf.compiled.has_dependency_cycle, reads_clock
    )


def _failed_if_stored(result: FlagResult, pf: ProjectFlags) -> FlagResult:
    """Without the store, a flag that reads stored properties cannot be trusted."""
    if result.key in pf.stored_data_keys:
        return msgspec.structs.replace(result, failed=True)
    return result


def _v2_flag(r: FlagResult) -> dict[str, Any]:
    meta: dict[str, Any] = {"id": r.id, "version": r.version, "description": r.description}
    if r.payload is not None:
        meta["payload"] = r.payload
    out: dict[str, Any] = {
        "key": r.key,
        "enabled": r.enabled,
        "reason": {
            "code": r.reason_code,
            "condition_index": r.condition_index if r.condition_index is not None else 0,
            "description": r.reason_description,
        },
        "metadata": meta,
    }
    if r.variant is not None:
        out["variant"] = r.variant
    if r.failed:
        out["failed"] = True
    return out


def v2_parts(results: list[FlagResult], fragments: Fragments) -> tuple[bytes | memoryview, ...]:
    """The v2 answer's ``{"flags":{...}`` as parts to join: per-result JSON fragments.

    The engine shares one result object per outcome of a flag, so each outcome is encoded
    once per definitions version. Fragments (each ``,"key":{...}``) are found by the result's
    identity; ``fragments`` keeps every such result alive, so no other object can have its
    id meanwhile. The parts are shared, not copied: an answer kept by the answer cache costs
    a pointer per flag.
    """
    by_id = fragments.by_id
    try:
        parts = list(map(by_id.__getitem__, map(id, results)))
    except KeyError:
        if len(by_id) > 50_000:
            fragments.clear()
        parts = []
        for r in results:
            part = by_id.get(id(r))
            if part is None:
                part = by_id[id(r)] = b"," + _encode(r.key) + b":" + _encode(_v2_flag(r))
                fragments.owners.append(r)
            parts.append(part)
    if not parts:
        return (b'{"flags":{}',)
    return (b'{"flags":{', memoryview(parts[0])[1:], *parts[1:], b"}")


def config_fields(has_flags: bool, surveys: bool = False) -> dict[str, Any]:
    """What posthog-js reads at start-up (from /flags?config=true or /array/<token>/config);
    ``surveys``: a survey is active, so posthog-js loads its survey code and the list."""
    return {
        "config": {"enable_collect_everything": True},
        "toolbarParams": {},
        "isAuthenticated": False,
        "supportedCompression": SUPPORTED_COMPRESSION,
        "hasFeatureFlags": has_flags,
        "sessionRecording": False,
        "autocapture_opt_out": False,
        "autocaptureExceptions": False,
        "captureDeadClicks": False,
        "capturePerformance": False,
        "heatmaps": False,
        "surveys": surveys,
        "siteApps": [],
        "elementsChainAsString": True,
        "defaultIdentifiedOnly": True,
    }


def _legacy_head(results: list[FlagResult]) -> bytes:
    """The legacy answer up to its other fields (``featureFlags``, ``featureFlagPayloads``)."""
    return _encode(
        {
            "featureFlags": {r.key: (r.variant or True) if r.enabled else False for r in results},
            "featureFlagPayloads": {
                r.key: r.payload for r in results if r.enabled and r.payload is not None
            },
        }
    )[:-1]


async def _flags_head(
    svc: Services,
    request: Request,
    body: FlagsRequest,
    project: Project,
    pf: ProjectFlags,
    legacy: bool,
) -> tuple[tuple[bytes | memoryview, ...], bool]:
    """The answer's flags part (parts to join) and whether some flags failed: reused from
    this worker's answer cache when the same request was answered since anything it read last moved
    (``server/answers.py``), else evaluated (and kept when nothing failed)."""
    cache = svc.answers
    version = svc.store.answers_version() if cache is not None else None
    inputs = request_inputs(svc, request, body)
    if cache is None or version is None:
        computed = await compute_flags(svc, request, body, project, pf, inputs)
        return _head(computed.results, pf, legacy), computed.errors
    headers = request.headers
    key = (
        project.id,
        legacy,
        inputs.runtime,
        inputs.ip,
        headers.get("content-type"),
        headers.get("content-encoding"),
        request.query.get("compression"),
        request.body,
    )
    definitions = pf.definitions.version
    hit = cache.get(key, definitions, version)
    if hit is not None:
        svc.metrics.flag_answers_reused += 1
        svc.metrics.flag_evaluations += hit.count
        return hit.head, False
    computed = await compute_flags(svc, request, body, project, pf, inputs)
    head = _head(computed.results, pf, legacy)
    if not computed.errors:
        cache.put(key, head, len(computed.results), definitions, version, computed.reads_clock)
    return head, computed.errors


def _head(
    results: list[FlagResult], pf: ProjectFlags, legacy: bool
) -> tuple[bytes | memoryview, ...]:
    return (_legacy_head(results),) if legacy else v2_parts(results, pf.fragments)


async def _answer(svc: Services, request: Request, *, legacy: bool) -> Response:
    body, refusal = _decode_request(svc, request)
    token = body.api_key or body.token or body.dollar_token
    project = await project_for_token(svc, token)
    limited = count_flag_request(svc, project)
    request_id = str(uuid_utils.uuid4())
    want_config = request.query.get("config") in ("true", "1", "True")
    pf = await svc.definitions.get(project.id)

    if limited or body.disable_flags is True:
        head = _head([], pf, legacy)
        errors = False
    elif refusal is not None:
        raise refusal
    else:
        head, errors = await _flags_head(svc, request, body, project, pf, legacy)
    if errors:
        svc.metrics.flag_errors += 1

    extra: dict[str, Any] = {}
    if limited:
        extra["quotaLimited"] = ["feature_flags"]
    if want_config:
        extra.update(
            config_fields(bool(pf.definitions.flags), await svc.surveys.any_active(project.id))
        )
    # Built by hand: msgspec would copy the ~10 kB flags object into a growing buffer.
    evaluated = b"" if legacy else b',"evaluatedAt":%d' % clock.now_ms()
    rest = b',"errorsWhileComputingFlags":%s,"requestId":%s%s%s' % (
        b"true" if errors else b"false",
        _encode(request_id),
        evaluated,
        (b"," + _encode(extra)[1:]) if extra else b"}",
    )
    return Response(b"".join((*head, rest)))


def _version(request: Request) -> int:
    raw = request.query.get("v", "")
    try:
        return int(raw) if raw else 1
    except ValueError:
        raise ApiError(400, "invalid_input", "v must be an integer", "v") from None


async def flags_endpoint(svc: Services, request: Request) -> Response:
    return await _answer(svc, request, legacy=_version(request) < 2)


async def decide_endpoint(svc: Services, request: Request) -> Response:
    """PostHog's older endpoint: v3 and below answer the legacy shape, v4 and above v2's."""
    return await _answer(svc, request, legacy=_version(request) < 4)


async def definitions_endpoint(svc: Services, request: Request) -> Response:
    """Flag definitions for SDK local evaluation, with a weak ETag."""
    key = await check_personal_key(svc.store, request.headers)
    token = request.query.get("token")
    if token:
        project = await project_for_token(svc, token)
        if project.id != key.project_id:
            raise ApiError(401, "invalid_api_key", "the key does not belong to this project")
    if svc.quotas.flags_exceeded(key.project_id):
        raise ApiError(402, "quota_limited", "the feature flag quota is exceeded")
    pf = await svc.definitions.get(key.project_id)
    headers = [(b"etag", pf.etag.encode()), (b"cache-control", b"no-cache")]
    if_none_match = request.headers.get("if-none-match")
    if if_none_match and pf.etag in {t.strip() for t in if_none_match.split(",")}:
        return Response(b"", 304, headers=headers)
    return Response(pf.local_evaluation_body, headers=headers)


async def remote_config_endpoint(svc: Services, request: Request) -> Response:
    """The payload of a remote-config flag: GET .../feature_flags/<key>/remote_config."""
    key = await check_personal_key(svc.store, request.headers)
    parts = request.path.rstrip("/").split("/")
    # /api/projects/{id}/feature_flags/{flag key}/remote_config
    if len(parts) != 7 or parts[4] != "feature_flags":
        raise ApiError(404, "not_found", "no such route")
    if parts[3] != "@current" and parts[3] != str(key.project_id):
        raise ApiError(404, "not_found", "no such project")
    flag = await svc.store.get_flag_by_key(key.project_id, parts[5])
    if flag is None:
        raise ApiError(404, "not_found", "no such feature flag")
    payload = (flag.filters.get("payloads") or {}).get("true")
    # As PostHog answers: the stored payload (JSON text) as a JSON string, which
    # posthog-python returns as is and posthog-node parses; null when the flag has none
    # (an error body would reach posthog-node's caller as if it were the payload).
    return Response(_encode(payload))


async def array_config_endpoint(svc: Services, request: Request) -> Response:
    """posthog-js start-up: /array/<token>/config (JSON) and /array/<token>/config.js."""
    parts = request.path.strip("/").split("/")
    if len(parts) != 3 or parts[2] not in ("config", "config.js"):
        raise ApiError(404, "not_found", "no such route")
    project = await project_for_token(svc, parts[1])
    pf = await svc.definitions.get(project.id)
    surveys = await svc.surveys.any_active(project.id)
    config = {"token": project.api_token, **config_fields(bool(pf.definitions.flags), surveys)}
    if parts[2] == "config":
        return Response(_encode(config))
    script = (
        "(function(){window._POSTHOG_REMOTE_CONFIG=window._POSTHOG_REMOTE_CONFIG||{};"
        f"window._POSTHOG_REMOTE_CONFIG[{_encode(project.api_token).decode()}]="
        f"{{config:{_encode(config).decode()},siteApps:[]}};}})();"
    )
    return Response(script.encode(), content_type=b"application/javascript")
