"""The OpenAPI 3.1 document of every route, served at /api/schema/ and rendered at /api/docs.

Built from the app's route tables (the management API's ``ROUTES`` and the public routes), so
a route cannot be served without appearing here. Request bodies are the Structs the handlers
decode them with: the use cases' inputs in ``application/`` (``FeatureFlagInput``...) and the
public ones (``http/flags.py``'s ``FlagsRequest``, ``http/ofrep_schemas.py``'s
``OfrepEvaluationRequest``; capture's ``CaptureBatch`` and ``CaptureEvent`` from
``ingest/body.py``). Response bodies are the Structs of the ``http/*schemas.py`` modules, or
the record the answer renders (``flags/records.py``'s ``FeatureFlag``, ``store/records.py``'s
``Cohort``). msgspec turns both into JSON Schema components.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flagstaff import __version__
from flagstaff.application import accounts, approvals, webhooks
from flagstaff.application import cohorts as co
from flagstaff.application import flags as fl
from flagstaff.application import people as pe
from flagstaff.application.early_access import EarlyAccessFeatureInput
from flagstaff.application.experiments import ExperimentInput
from flagstaff.application.holdouts import HoldoutInput
from flagstaff.application.surveys import SurveyInput
from flagstaff.http import account_schemas as a
from flagstaff.http import approval_schemas as ap
from flagstaff.http import flags as public_flags
from flagstaff.http import ofrep_schemas as of
from flagstaff.http import schemas as s
from flagstaff.http import survey_schemas as ss
from flagstaff.http import team_schemas as t
from flagstaff.http import usage_schemas as us
from flagstaff.ingest.body import CaptureBatch, CaptureEvent
from flagstaff.store.records import Cohort

_REF = "#/components/schemas/{name}"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    description: str
    where: str = "query"


@dataclass(frozen=True)
class Doc:
    """How one path's operations are documented."""

    summary: str
    response: Any = None
    """The success body's type (a tuple: one of these); None for no body."""
    request: Any = None
    """The body's type (a tuple: any of these)."""
    status: int = 200
    media: str = "application/json"
    query: tuple[Param, ...] = ()
    auth: bool = False
    """A personal API key (``Authorization: Bearer phx_...``) is required."""
    extra: tuple[tuple[int, str], ...] = ()
    """Other answers than errors: (status, description)."""
    errors: tuple[int, ...] = (400, 401)
    """Error answers (each with the Error body)."""
    form: Any = None
    """A ``multipart/form-data`` body the route also takes (besides ``request``)."""
    alternates: tuple[tuple[int, Any, str], ...] = ()
    """Other answers with a body: (status, type, description)."""
    project_token: bool = False
    """The project token is required in a header (``Authorization: Bearer`` or ``X-API-Key``)."""


class PublicRouteLike(Protocol):
    name: str
    methods: frozenset[str]


# management API, by handler name -------------------------------------------------------------

_PAGING = (Param("limit", "integer", "page size"), Param("offset", "integer", "rows to skip"))
_VALUES_QUERY = (
    Param("key", "string", "the property's name (required)"),
    Param("value", "string", "only values containing this text (any case)"),
    Param("limit", "integer", "values to answer, most frequent first (default 20, at most 100)"),
)
_HELD = (
    (
        202,
        ap.ChangeRequest,
        "held for approval (the project's approval policy is on): the stored change request; "
        "nothing changes until someone else approves it",
    ),
)
_ADMIN: dict[str, Doc] = {
    "list_projects": Doc("", s.ProjectPage),
    "create_project": Doc("", s.CreatedProject, accounts.ProjectInput, 201),
    "get_project": Doc("", s.ProjectSettings),
    "list_flags": Doc("", s.FeatureFlagPage, query=_PAGING),
    "create_flag": Doc("", s.FeatureFlag, fl.FeatureFlagInput, 201),
    "get_flag": Doc("", s.FeatureFlag),
    "update_flag": Doc("", s.FeatureFlag, fl.FeatureFlagInput, alternates=_HELD),
    "replace_flag": Doc("", s.FeatureFlag, fl.FeatureFlagInput, alternates=_HELD),
    "delete_flag": Doc("", None, status=204, alternates=_HELD),
    "list_cohorts": Doc("", s.CohortPage, query=_PAGING),
    "create_cohort": Doc("", Cohort, co.CohortInput, 201, form=co.CohortCsvInput),
    "get_cohort": Doc("", Cohort),
    "update_cohort": Doc("", Cohort, co.CohortInput, form=co.CohortCsvInput),
    "delete_cohort": Doc("", None, status=204),
    "list_cohort_members": Doc("", s.DistinctIdPage),
    "add_cohort_members": Doc("", Cohort, co.DistinctIds),
    "remove_cohort_members": Doc("", Cohort, co.DistinctIds),
    "find_person": Doc(
        "", s.PersonPage, query=(Param("distinct_id", "string", "a distinct id of the person"),)
    ),
    "find_group": Doc(
        "",
        s.Group,
        query=(
            Param("group_type_index", "integer", "group type index, 0-4"),
            Param("group_key", "string", "the group's key"),
        ),
    ),
    "list_group_types": Doc("", list[s.GroupType]),
    "create_group_type": Doc(
        "", s.GroupType, pe.GroupTypeInput, 201, extra=((200, "the group type existed already"),)
    ),
    "list_events": Doc(
        "",
        s.EventPage,
        query=(
            Param("distinct_id", "string", "only this distinct id's events"),
            Param("event", "string", "only events with this name"),
            Param("after", "string", "ISO 8601: only events after this time"),
            Param("before", "string", "ISO 8601: only events before this time"),
            Param("limit", "integer", "page size, at most 1000"),
            Param("cursor", "string", "opaque cursor from the previous page's next link"),
        ),
    ),
    "list_warnings": Doc("", s.WarningPage, query=_PAGING),
    "update_project": Doc("", s.ProjectSettings, accounts.ProjectUpdate),
    "list_members": Doc("", t.MemberPage),
    "add_member": Doc("", t.CreatedMember, accounts.MemberInput, 201),
    "update_member": Doc("", t.Member, accounts.MemberRoleInput),
    "remove_member": Doc("", None, status=204),
    "end_member_sessions": Doc("", t.EndedSessions, dict[str, Any]),
    "list_groups": Doc(
        "",
        t.GroupPage,
        query=(
            Param("group_type_index", "integer", "the group type's index, 0-4 (required)"),
            Param("search", "string", "only groups whose key contains this (any case)"),
            *_PAGING,
        ),
    ),
    "list_surveys": Doc("", ss.SurveyPage, query=_PAGING),
    "create_survey": Doc("", ss.Survey, SurveyInput, 201),
    "get_survey": Doc("", ss.Survey),
    "patch_survey": Doc("", ss.Survey, SurveyInput),
    "put_survey": Doc("", ss.Survey, SurveyInput),
    "delete_survey": Doc("", None, status=204),
    "archive_survey": Doc("", ss.Survey, dict[str, Any]),
    "survey_stats": Doc("", ss.SurveyStats),
    "all_survey_stats": Doc("", ss.AllSurveyStats),
    "survey_summary": Doc(
        "",
        ss.SurveySummary,
        query=(
            Param("question_id", "string", "only this question"),
            Param("limit", "integer", "open answers per page (default 50, at most 500)"),
            Param("offset", "integer", "open answers to skip"),
        ),
    ),
    "list_features": Doc("", ss.EarlyAccessFeaturePage, query=_PAGING),
    "create_feature": Doc("", ss.EarlyAccessFeature, EarlyAccessFeatureInput, 201),
    "get_feature": Doc("", ss.EarlyAccessFeature),
    "patch_feature": Doc("", ss.EarlyAccessFeature, EarlyAccessFeatureInput),
    "delete_feature": Doc("", None, status=204),
    "rollback_flag": Doc("", s.FeatureFlag, fl.RollbackInput, alternates=_HELD),
    "flag_activity": Doc(
        "",
        a.FlagActivityPage,
        query=(
            Param("limit", "integer", "page size (default 10)"),
            Param("page", "integer", "page number, from 1"),
        ),
    ),
    "activity_log": Doc(
        "",
        a.ActivityPage,
        query=(
            Param("scope", "string", "only this kind of item (FeatureFlag, Cohort, ...)"),
            Param("item_id", "string", "only this item"),
            Param("user", "integer", "only changes by this user id"),
            Param("cursor", "string", "opaque cursor from the previous page's next link"),
        ),
    ),
    "list_scheduled_changes": Doc(
        "",
        a.ScheduledChangePage,
        query=(Param("record_id", "integer", "only this feature flag's changes"),),
    ),
    "create_scheduled_change": Doc(
        "", a.ScheduledChange, fl.ScheduledChangeInput, 201, alternates=_HELD
    ),
    "delete_scheduled_change": Doc("", None, status=204),
    "list_keys": Doc("", list[a.PersonalApiKey]),
    "create_key": Doc("", a.CreatedPersonalApiKey, accounts.PersonalApiKeyInput, 201),
    "revoke_key": Doc("", None, status=204),
    "list_experiments": Doc("", s.ExperimentPage, query=_PAGING),
    "create_experiment": Doc("", s.Experiment, ExperimentInput, 201),
    "get_experiment": Doc("", s.Experiment),
    "patch_experiment": Doc("", s.Experiment, ExperimentInput),
    "put_experiment": Doc("", s.Experiment, ExperimentInput),
    "delete_experiment": Doc("", None, status=204),
    "experiment_results": Doc("", s.ExperimentResults),
    "list_holdouts": Doc("", s.HoldoutPage),
    "create_holdout": Doc("", s.Holdout, HoldoutInput, 201),
    "get_holdout": Doc("", s.Holdout),
    "update_holdout": Doc("", s.Holdout, HoldoutInput),
    "delete_holdout": Doc("", None, status=204, extra=((400, "used by an experiment"),)),
    "flag_usage": Doc(
        "", us.FlagUsage, query=(Param("days", "integer", "days ending today (UTC), 1-365; 30"),)
    ),
    "person_values": Doc("", list[us.PropertyValue], query=_VALUES_QUERY),
    "group_values": Doc(
        "",
        list[us.PropertyValue],
        query=(Param("group_type_index", "integer", "group type index, 0-4"), *_VALUES_QUERY),
    ),
    "get_approval_policy": Doc("", ap.ApprovalPolicy),
    "update_approval_policy": Doc(
        "", ap.ApprovalPolicy, approvals.ApprovalPolicyInput, errors=(403,)
    ),
    "list_change_requests": Doc(
        "",
        ap.ChangeRequestPage,
        query=(
            Param("status", "string", "only requests in this status (pending, applied...)"),
            Param("record_id", "integer", "only this feature flag's requests"),
            *_PAGING,
        ),
    ),
    "get_change_request": Doc("", ap.ChangeRequest),
    "approve_change_request": Doc(
        "",
        ap.ChangeRequest,
        approvals.DecisionInput,
        errors=(403, 409),
    ),
    "reject_change_request": Doc("", ap.ChangeRequest, approvals.DecisionInput, errors=(403, 409)),
    "list_webhooks": Doc("", ap.WebhookPage, errors=(403,)),
    "create_webhook": Doc("", ap.CreatedWebhook, webhooks.WebhookInput, 201, errors=(403,)),
    "get_webhook": Doc("", ap.Webhook, errors=(403,)),
    "update_webhook": Doc(
        "",
        ap.Webhook,
        webhooks.WebhookUpdate,
        errors=(403,),
        alternates=((200, ap.CreatedWebhook, "with rotate_secret: the new secret, once"),),
    ),
    "delete_webhook": Doc("", None, status=204, errors=(403,)),
    "list_deliveries": Doc("", ap.WebhookDeliveryPage, query=_PAGING, errors=(403,)),
    "redeliver": Doc(
        "",
        ap.WebhookDelivery,
        dict[str, Any],
        202,
        errors=(403, 409),
    ),
}

# public routes, by route name -----------------------------------------------------------------

_FLAGS_QUERY = (
    Param("v", "integer", "answer shape: 2 (and /decide 4) for detailed flags"),
    Param("config", "boolean", "also answer posthog-js's start-up configuration"),
)
_FLAGS_OR_LEGACY = (s.FlagsResponse, s.LegacyFlagsResponse)  # by the v query parameter
_FLAGS = Doc(
    "Evaluate every flag for a distinct id (the project token is the body's api_key)",
    _FLAGS_OR_LEGACY,
    public_flags.FlagsRequest,
    query=_FLAGS_QUERY,
)
_DEFINITIONS = Doc(
    "Flag definitions for SDK local evaluation (weak ETag; 304 to If-None-Match)",
    s.LocalEvaluationResponse,
    query=(Param("token", "string", "the project token (optional; must match the key)"),),
    auth=True,
    extra=((304, "not modified since the ETag given"),),
    errors=(401, 402),
)
_CAPTURE_BODY = (CaptureBatch, CaptureEvent, list[CaptureEvent])
"""What capture decodes a body with (``ingest/normalize.py``): a batch, one event or an array."""
_CAPTURE = Doc(
    "Capture events (one, or a batch), answered once stored",
    s.CaptureResponse,
    _CAPTURE_BODY,
    query=(
        Param("compression", "string", "gzip-js, lz64 or base64: how the body is encoded"),
        Param("ip", "string", "1: take the client IP for $ip (posthog-js)"),
        Param("beacon", "string", "1: answer 204 with no body (sendBeacon)"),
        Param("_", "integer", "the client's send time in ms"),
        Param("ver", "string", "the SDK's version"),
        Param("data", "string", "GET: the encoded event or batch"),
    ),
    extra=((204, "stored (beacon=1)"),),
)
_OFREP_AUTH = "the project token as Authorization: Bearer <token> or X-API-Key"
_OFREP_ERRORS = (
    (400, of.OfrepFailure, "PARSE_ERROR, TARGETING_KEY_MISSING or INVALID_CONTEXT"),
    (401, of.OfrepFailure, "no project has this token (or none was sent)"),
    (429, of.OfrepFailure, "over the project's flag quota this minute (Retry-After)"),
    (500, of.OfrepFailure, "the flag could not be evaluated"),
)
_PUBLIC: dict[str, Doc] = {
    "/_health": Doc("Liveness", s.Status, errors=()),
    "/_ready": Doc(
        "Readiness: the store answers", s.Status, extra=((503, "store unreachable"),), errors=()
    ),
    "/metrics": Doc("Prometheus metrics of every worker", str, media="text/plain", errors=()),
    "/flags": _FLAGS,
    "/decide": Doc(
        "PostHog's older flags endpoint: v=4 and above answer /flags?v=2's shape",
        _FLAGS_OR_LEGACY,
        public_flags.FlagsRequest,
        query=_FLAGS_QUERY,
    ),
    "/ofrep/v1/evaluate/flags/{key}": Doc(
        f"OpenFeature (OFREP): evaluate one flag for a context; {_OFREP_AUTH}",
        of.OfrepEvaluation,
        of.OfrepEvaluationRequest,
        errors=(),
        alternates=(*_OFREP_ERRORS, (404, of.OfrepFailure, "FLAG_NOT_FOUND")),
        project_token=True,
    ),
    "/ofrep/v1/evaluate/flags": Doc(
        f"OpenFeature (OFREP): evaluate every flag for a context, with an ETag (304 to a "
        f"matching If-None-Match); {_OFREP_AUTH}",
        of.OfrepBulkEvaluation,
        of.OfrepEvaluationRequest,
        extra=((304, "no answer changed since the ETag given"),),
        errors=(),
        alternates=_OFREP_ERRORS,
        project_token=True,
    ),
    "/ofrep/v1/configuration": Doc(
        f"OpenFeature (OFREP): the server's name, value types and polling hint; {_OFREP_AUTH}",
        of.OfrepConfiguration,
        extra=((304, "unchanged since the ETag given"),),
        errors=(),
        alternates=((401, of.OfrepFailure, "no project has this token (or none was sent)"),),
        project_token=True,
    ),
    "/flags/definitions": _DEFINITIONS,
    "/api/feature_flag/local_evaluation": _DEFINITIONS,
    "/array/{token}/config": Doc("posthog-js start-up configuration", s.ClientConfig),
    "/array/{token}/config.js": Doc(
        "posthog-js start-up configuration as a script", str, media="application/javascript"
    ),
    "/api/projects/{project_id}/feature_flags/{key}/remote_config": Doc(
        "The payload of a remote-config flag (JSON text as a JSON string; null without one)",
        str | None,
        auth=True,
        errors=(401, 404),
    ),
    **{path: _CAPTURE for path in ("/e", "/i/v0/e", "/capture", "/batch", "/track", "/engage")},
    "/s": Doc(
        "Session recording snapshots: accepted like events", s.CaptureResponse, _CAPTURE_BODY
    ),
    "/api/surveys": Doc(
        "The active surveys posthog-js shows (their flags decide for whom)",
        ss.PublicSurveyList,
        query=(Param("token", "string", "the project token"),),
        errors=(401,),
    ),
    "/api/early_access_features": Doc(
        "Early access features posthog-js lists",
        ss.PublicEarlyAccessFeatureList,
        query=(
            Param("token", "string", "the project token"),
            Param("stage", "string", "repeatable or comma-separated; beta when absent"),
        ),
        errors=(400, 401),
    ),
    "/api/web_experiments": Doc(
        "Web experiments posthog-js loads (an empty list until the product exists)",
        s.WebExperimentList,
        query=(Param("token", "string", "the project token"),),
        errors=(401,),
    ),
    "/api/product_tours": Doc(
        "Product tours posthog-js loads (an empty list until the product exists)",
        s.ProductTourList,
        query=(Param("token", "string", "the project token"),),
        errors=(401,),
    ),
    "/static/{name}": Doc(
        "posthog-js's lazily loaded bundles (surveys.js, recorder.js, array.js...) from the "
        "installed npm package; /static/{version}/{name} serves that version only",
        str,
        media="application/javascript",
        query=(Param("v", "string", "posthog-js's version: a versioned URL is cached a year"),),
        errors=(404,),
    ),
}
# Public routes whose table entry stands for several documented paths.
_PUBLIC_ALIASES = {
    "/array/{token}/config": ("/array/{token}/config", "/array/{token}/config.js"),
    "/api/projects/{id}/feature_flags/{key}/remote_config": (
        "/api/projects/{project_id}/feature_flags/{key}/remote_config",
    ),
}
SELF_PATHS: dict[str, Doc] = {
    "/api/schema/": Doc("This OpenAPI document", dict[str, Any], errors=()),
    "/api/docs": Doc(
        "This document rendered by redoc",
        str,
        media="text/html",
        extra=((503, "the renderer is not installed (the answer says how)"),),
        errors=(),
    ),
    "/api/docs/redoc.standalone.js": Doc(
        "The renderer's script, installed from npm", str, media="text/javascript", errors=(503,)
    ),
}


def documented_paths(public: Iterable[PublicRouteLike]) -> list[tuple[str, frozenset[str]]]:
    """(OpenAPI path, methods) of the public routes, aliases expanded."""
    out = []
    for route in public:
        methods = frozenset(route.methods) - {"HEAD", "OPTIONS"}
        for path in _PUBLIC_ALIASES.get(route.name, (route.name,)):
            out.append((path, methods))
    return out


def _operation(
    doc: Doc, method: str, path: str, op_id: str, refs: dict[Any, Any], summary: str
) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
        for p in re.findall(r"{(\w+)}", path)
    ]
    params += [
        {"name": q.name, "in": q.where, "required": False, "schema": {"type": q.kind}}
        | {"description": q.description}
        for q in doc.query
    ]
    success: dict[str, Any] = {"description": "success"}
    if isinstance(doc.response, tuple):
        one_of = {"oneOf": [refs[t] for t in doc.response]}
        success["content"] = {doc.media: {"schema": one_of}}
    elif doc.response is not None:
        success["content"] = {doc.media: {"schema": refs[doc.response]}}
    responses: dict[str, Any] = {str(doc.status): success}
    for status, description in doc.extra:
        responses[str(status)] = {"description": description}
    for status, kind, description in doc.alternates:
        if str(status) == str(doc.status):  # the same status, another shape: one of both
            shapes = [success["content"][doc.media]["schema"], refs[kind]]
            success["content"] = {doc.media: {"schema": {"oneOf": shapes}}}
            success["description"] = f"success; {description}"
            continue
        schema = {"schema": refs[kind]}
        responses[str(status)] = {"description": description, "content": {doc.media: schema}}
    for status in doc.errors:
        responses.setdefault(str(status), _ERROR)
    op: dict[str, Any] = {
        "operationId": op_id,
        "tags": [_tag(path)],
        "summary": summary or doc.summary,
        "parameters": params,
        "responses": responses,
        "security": (
            [{"PersonalAPIKey": []}]
            if doc.auth
            else [{"ProjectToken": []}, {"ProjectTokenHeader": []}]
            if doc.project_token
            else []
        ),
    }
    if doc.request is not None and method in ("POST", "PATCH", "PUT"):
        if isinstance(doc.request, tuple):  # shapes that may overlap (capture's objects)
            request_schema = {"anyOf": [refs[t] for t in doc.request]}
        else:
            request_schema = refs[doc.request]
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": request_schema}},
        }
        if doc.form is not None:
            op["requestBody"]["content"]["multipart/form-data"] = {"schema": refs[doc.form]}
    return op


def _tag(path: str) -> str:
    if path in SELF_PATHS or path in ("/_health", "/_ready", "/metrics"):
        return "Operations"
    flag_paths = ("/flags", "/decide", "/array", "/api/feature_flag/", "/ofrep/")
    if path.endswith("/remote_config") or path.startswith(flag_paths):
        return "Flags (SDKs)"
    if path.startswith("/api/"):
        return "Management API"
    return "Capture (SDKs)"


_ERROR = {
    "description": "error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def openapi_document(
    admin_routes: Sequence[tuple[str, str, Any, str]], public: Iterable[PublicRouteLike]
) -> dict[str, Any]:
    admin_docs = [
        (method, path, handler.__name__, summary, _ADMIN.get(handler.__name__, Doc(summary)))
        for method, path, handler, summary in admin_routes
    ]
    public_docs = [
        (method, path, _PUBLIC.get(path, Doc("")))
        for path, methods in documented_paths(public)
        for method in sorted(methods)
    ]
    self_docs = [("GET", path, doc) for path, doc in SELF_PATHS.items()]
    types: list[Any] = [s.Error]
    for doc in [d for *_, d in admin_docs] + [d for *_, d in public_docs + self_docs]:
        for kind in (doc.response, doc.request, doc.form):
            types += kind if isinstance(kind, tuple) else [kind] if kind is not None else []
        types += [kind for _, kind, _ in doc.alternates]
    unique = list(dict.fromkeys(types))
    schemas, components = msgspec.json.schema_components(unique, ref_template=_REF)
    refs = dict(zip(unique, schemas, strict=True))

    paths: dict[str, dict[str, Any]] = {}
    for method, path, name, summary, doc in admin_docs:
        doc = dataclasses.replace(doc, errors=tuple(sorted({400, 401, 404, *doc.errors})))
        op = _operation(doc, method, path, name, refs, summary)
        op["security"] = [{"PersonalAPIKey": []}]
        paths.setdefault(path, {})[method.lower()] = op
    for method, path, doc in public_docs + self_docs:
        op_id = f"{method.lower()}{re.sub(r'[^A-Za-z0-9]+', '_', path).rstrip('_')}"
        paths.setdefault(path, {})[method.lower()] = _operation(doc, method, path, op_id, refs, "")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Flagstaff API",
            "version": __version__,
            "description": (
                "PostHog's public API: flags and capture (authorised by the project token in "
                "the body), and the management API under /api/projects/ (a personal API key)."
            ),
        },
        "paths": paths,
        "components": {
            "securitySchemes": {
                "PersonalAPIKey": {"type": "http", "scheme": "bearer"},
                "ProjectToken": {"type": "http", "scheme": "bearer"},
                "ProjectTokenHeader": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            },
            "schemas": components,
        },
    }


def schema_route(document: dict[str, Any]) -> Route:
    """GET /api/schema/: the document, encoded once."""
    body = msgspec.json.encode(document)

    async def serve_schema(request: Request) -> Response:
        return Response(body, media_type="application/json")

    return Route("/api/schema/", serve_schema)
