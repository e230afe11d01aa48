"""Approvals on the management API: a project's policy (``/approval_policy/``, admins change
it) and the change requests flag writes become while it is on (``/change_requests/``: list,
get, approve, reject).

With the policy on, PATCH, PUT and DELETE of a flag, a rollback and a new scheduled change
answer 202 with the stored request (:func:`request_json`) instead of applying; nothing is
live until someone else approves it. Approving applies the change through the ordinary
update path (flag rules, version check, activity record whose actor is the requester and
whose trigger names the approver) in the same transaction that marks the request applied. A
request whose flag changed meanwhile is marked stale (409) and must be made again. PostHog
has no such API: the shapes are ours, documented in the OpenAPI table.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
from starlette.requests import Request

from flagstaff.accounts.roles import Action
from flagstaff.activity import approvals
from flagstaff.activity.approvals import ChangeRequest, RequestKind, RequestStatus
from flagstaff.activity.diff import changes_between
from flagstaff.activity.records import Actor, ChangeSource, Scope
from flagstaff.activity.scheduled import MODEL_NAME, Operation
from flagstaff.application.errors import ApiError
from flagstaff.common import clock
from flagstaff.common.clock import ms_to_iso
from flagstaff.http.admin_context import AdminContext, Handler
from flagstaff.http.rest import int_param, json_body, paginated, path_int
from flagstaff.store.base import Conflict

P = "/api/projects/{project_id}"


def request_json(request: ChangeRequest, current: dict[str, Any] | None) -> dict[str, Any]:
    """A change request as the API shows it. ``changes`` is what approving would change in
    the flag as it is now (``current``), for pending requests; null once decided."""
    body = request.body
    scheduled = None
    flag = None
    if request.kind is RequestKind.SCHEDULE:
        scheduled = {
            "payload": body.get("payload"),
            "scheduled_at": ms_to_iso(int(body.get("run_at_ms") or 0)),
        }
    else:
        flag = body
    changes = None
    if request.status is RequestStatus.PENDING and flag is not None:
        changes = msgspec.to_builtins(changes_between(Scope.FEATURE_FLAG, current, flag))

    def user(user_id: int | None) -> dict[str, Any] | None:
        return {"id": user_id} if user_id is not None else None

    return {
        "id": request.id,
        "kind": request.kind.value,
        "status": request.status.value,
        "model_name": MODEL_NAME,
        "record_id": str(request.flag_id) if request.flag_id is not None else None,
        "base_version": request.base_version,
        "flag": flag,
        "scheduled_change": scheduled,
        "changes": changes,
        "created_by": user(request.author_user_id),
        "created_at": ms_to_iso(request.created_at_ms),
        "decided_by": user(request.decided_by),
        "decided_at": ms_to_iso(request.decided_at_ms) if request.decided_at_ms else None,
        "comment": request.comment,
    }


def _policy_json(policy: approvals.ApprovalPolicy) -> dict[str, Any]:
    return {
        "enabled": policy.enabled,
        "updated_at": ms_to_iso(policy.updated_at_ms) if policy.updated_at_ms else None,
        "updated_by": {"id": policy.updated_by} if policy.updated_by is not None else None,
    }


# holding a write for approval --------------------------------------------------------------


async def _hold(
    ctx: AdminContext,
    flag: dict[str, Any],
    kind: RequestKind,
    body: dict[str, Any],
    base_version: int | None,
) -> tuple[int, dict[str, Any]] | None:
    """Store the write as a pending request when the project's policy is on: (202, its JSON);
    None when the write may go ahead."""
    policy = await ctx.store.approval_policy(ctx.project_id)
    if not policy.enabled:
        return None
    principal = ctx.principal
    request = ChangeRequest(
        id=0,
        project_id=ctx.project_id,
        flag_id=flag["id"],
        body=body,
        base_version=base_version,
        author_user_id=principal.user_id,
        author_key_id=principal.key_id if principal.user_id is None else None,
        status=RequestStatus.PENDING,
        created_at_ms=clock.now_ms(),
        kind=kind,
    )
    made = await ctx.store.create_change_request(request, flag["key"], ctx.source)
    return 202, request_json(made, flag)


async def hold_flag_write(
    ctx: AdminContext, current: dict[str, Any], flag: dict[str, Any]
) -> tuple[int, dict[str, Any]] | None:
    """Before a flag update or delete: (202, the request) when it must wait for approval;
    (200, the flag as it is) when the write would change nothing anyone sees."""
    kind = RequestKind.DELETE if flag.get("deleted") and not current["deleted"] else None
    if not changes_between(Scope.FEATURE_FLAG, current, flag):
        policy = await ctx.store.approval_policy(ctx.project_id)
        return (200, current) if policy.enabled else None
    return await _hold(
        ctx, current, kind or RequestKind.UPDATE, {**flag, "version": current["version"]},
        current["version"],
    )  # fmt: skip


async def hold_schedule(
    ctx: AdminContext,
    flag: dict[str, Any],
    operation: Operation,
    payload: dict[str, Any],
    run_at_ms: int,
) -> tuple[int, dict[str, Any]] | None:
    """Before a scheduled change is created: (202, the request) when it must wait for
    approval (approval is given at scheduling time; the change then runs when due)."""
    body = {"operation": operation.value, "payload": payload, "run_at_ms": run_at_ms}
    return await _hold(ctx, flag, RequestKind.SCHEDULE, body, None)


# the policy ---------------------------------------------------------------------------------


async def get_approval_policy(ctx: AdminContext, request: Request) -> Any:
    return _policy_json(await ctx.store.approval_policy(ctx.project_id))


async def update_approval_policy(ctx: AdminContext, request: Request) -> Any:
    body = await json_body(request)
    enabled = body.get("enabled") if isinstance(body, dict) else None
    if not isinstance(enabled, bool):
        raise ApiError(400, "required", "enabled (true or false) is required", "enabled")
    policy = await ctx.store.set_approval_policy(
        ctx.project_id, enabled, ctx.source, clock.now_ms()
    )
    return _policy_json(policy)


# change requests ----------------------------------------------------------------------------


async def _current_flag(ctx: AdminContext, request: ChangeRequest) -> dict[str, Any] | None:
    if request.flag_id is None:
        return None
    return await ctx.store.get_flag(ctx.project_id, request.flag_id)


async def _existing(ctx: AdminContext, request: Request) -> ChangeRequest:
    found = await ctx.store.get_change_request(ctx.project_id, path_int(request, "request_id"))
    if found is None:
        raise ApiError(404, "not_found", "no such change request")
    return found


async def list_change_requests(ctx: AdminContext, request: Request) -> Any:
    """Newest first; ``status`` and ``record_id`` filter."""
    limit = int_param(request, "limit", 100, 1000) or 100
    offset = int_param(request, "offset", 0)
    raw_status = request.query_params.get("status")
    try:
        status = RequestStatus(raw_status) if raw_status else None
    except ValueError:
        known = ", ".join(s.value for s in RequestStatus)
        raise ApiError(400, "invalid_input", f"status must be one of {known}", "status") from None
    raw_record = request.query_params.get("record_id")
    if raw_record is not None and not (raw_record.isdigit() and len(raw_record) < 19):
        raise ApiError(400, "invalid_input", "record_id must be a feature flag id", "record_id")
    page = await ctx.store.list_change_requests(
        ctx.project_id, status, int(raw_record) if raw_record else None, limit, offset
    )
    flags: dict[int, dict[str, Any] | None] = {}
    results = []
    for found in page.results:
        if found.status is RequestStatus.PENDING and found.flag_id not in flags:
            flags[found.flag_id] = await _current_flag(ctx, found)
        results.append(request_json(found, flags.get(found.flag_id)))
    return paginated(request, page.count, results, limit, offset)


async def get_change_request(ctx: AdminContext, request: Request) -> Any:
    found = await _existing(ctx, request)
    return request_json(found, await _current_flag(ctx, found))


def _comment(body: Any) -> str:
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_input", "the request body must be a JSON object")
    comment = body.get("comment", "")
    if not isinstance(comment, str) or len(comment) > approvals.MAX_COMMENT:
        raise ApiError(
            400,
            "invalid_input",
            f"comment must be text of at most {approvals.MAX_COMMENT} characters",
            "comment",
        )
    return comment


def _refused(found: ChangeRequest, problem: str) -> ApiError:
    if found.status is not RequestStatus.PENDING:
        return ApiError(409, "already_decided", problem)
    return ApiError(403, "permission_denied", problem)


def _flag_key(found: ChangeRequest, current: dict[str, Any] | None) -> str:
    if current is not None:
        return str(current.get("key"))
    return str(found.body.get("key", found.flag_id))


async def _mark_stale(ctx: AdminContext, decided: ChangeRequest, key: str, reason: str) -> None:
    stale = msgspec.structs.replace(decided, status=RequestStatus.STALE)
    with contextlib.suppress(Conflict):  # decided meanwhile by someone else: theirs stands
        await ctx.store.decide_change_request(stale, key, ctx.source)
    raise ApiError(409, "stale", reason)


async def approve_change_request(ctx: AdminContext, request: Request) -> Any:
    """Apply the request now: its author cannot, nor can a viewer."""
    comment = _comment(await json_body(request))
    found = await _existing(ctx, request)
    current = await _current_flag(ctx, found)
    live = current if current is not None and not current.get("deleted") else None
    now = clock.now_ms()
    decision = approvals.approve(found, ctx.principal, live["version"] if live else None, now)
    key = _flag_key(found, current)
    if decision.problem is not None:
        if decision.request.status is RequestStatus.STALE:
            await _mark_stale(ctx, decision.request, key, decision.problem)
        raise _refused(found, decision.problem)
    decided = msgspec.structs.replace(decision.request, comment=comment)
    author = Actor(user_id=found.author_user_id)
    apply_source = ChangeSource(actor=author, trigger=decision.trigger)
    try:
        done = await ctx.store.decide_change_request(decided, key, ctx.source, apply_source)
    except Conflict as exc:
        if exc.field == "version":  # the flag moved between our read and the write
            await _mark_stale(ctx, decided, key, "the flag changed since this request was made")
        if exc.field == "status":
            raise ApiError(409, "already_decided", exc.message) from None
        raise
    return request_json(done, None)


async def reject_change_request(ctx: AdminContext, request: Request) -> Any:
    """Refuse the request (anyone who may approve it), or withdraw it (its author)."""
    comment = _comment(await json_body(request))
    found = await _existing(ctx, request)
    decision = approvals.reject(found, ctx.principal, comment, clock.now_ms())
    if decision.problem is not None:
        raise _refused(found, decision.problem)
    key = _flag_key(found, await _current_flag(ctx, found))
    try:
        done = await ctx.store.decide_change_request(decision.request, key, ctx.source)
    except Conflict as exc:
        raise ApiError(409, "already_decided", exc.message) from None
    return request_json(done, None)


ROUTES = [
    ("GET", P + "/approval_policy/", get_approval_policy, "The project's approval policy"),
    (
        "PATCH",
        P + "/approval_policy/",
        update_approval_policy,
        "Turn approval of flag changes on or off (admins)",
    ),
    (
        "GET",
        P + "/change_requests/",
        list_change_requests,
        "List change requests (flag changes waiting for approval), newest first",
    ),
    ("GET", P + "/change_requests/{request_id}/", get_change_request, "Get a change request"),
    (
        "POST",
        P + "/change_requests/{request_id}/approve/",
        approve_change_request,
        "Approve a change request: its change goes live now (not by its author)",
    ),
    (
        "POST",
        P + "/change_requests/{request_id}/reject/",
        reject_change_request,
        "Reject a change request, or withdraw your own",
    ),
]

ROUTE_ACTIONS: dict[Handler, Action] = {
    update_approval_policy: Action.MANAGE,
    # who may decide is the pure rules' call (approvals.approve / reject): a viewer is
    # refused there, an author may withdraw their own request but not approve it
    approve_change_request: Action.VIEW,
    reject_change_request: Action.VIEW,
}
