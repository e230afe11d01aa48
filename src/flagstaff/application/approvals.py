"""Approvals: a project's policy, and the change requests flag writes become while it is on.

With the policy on, an update, replacement or deletion of a flag, a rollback and a new
scheduled change are held (:class:`Held`: the stored request, :func:`request_json`) instead
of applied; nothing is live until someone else approves it. Approving applies the change
through the ordinary update path (flag rules, version check, activity record whose actor is
the requester and whose trigger names the approver) in the same transaction that marks the
request applied. A request whose flag changed meanwhile is marked stale (409) and must be
made again. PostHog has no such API: the shapes are ours.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any, Protocol

import msgspec

from flagstaff.activity import approvals
from flagstaff.activity.approvals import (
    MAX_COMMENT,
    ApprovalPolicy,
    ChangeRequest,
    RequestKind,
    RequestStatus,
)
from flagstaff.activity.diff import changes_between
from flagstaff.activity.records import Actor, ChangeSource, Scope
from flagstaff.activity.scheduled import MODEL_NAME, Operation
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, existing
from flagstaff.application.inputs import decode
from flagstaff.common import clock
from flagstaff.common.clock import ms_to_iso
from flagstaff.flags.records import FeatureFlag, FlagDefinition, flag_json
from flagstaff.store.base import Conflict, Page


class ApprovalPolicyInput(msgspec.Struct):
    enabled: bool
    """On: flag updates, deletes, rollbacks and new scheduled changes wait for approval."""


class DecisionInput(msgspec.Struct):
    comment: Annotated[str, msgspec.Meta(max_length=MAX_COMMENT)] = ""
    """Why (at most 1000 characters)."""


class HoldStore(Protocol):
    """What holding a flag write reads (the policy) and writes (a change request)."""

    async def approval_policy(self, project_id: int) -> ApprovalPolicy: ...

    async def create_change_request(
        self, request: ChangeRequest, flag_key: str, source: ChangeSource
    ) -> ChangeRequest: ...


class ApprovalReads(Protocol):
    """The policy, the change requests and the flags they change, as they are (what the
    console's approvals page reads)."""

    async def approval_policy(self, project_id: int) -> ApprovalPolicy: ...

    async def list_change_requests(
        self,
        project_id: int,
        status: RequestStatus | None,
        flag_id: int | None,
        limit: int,
        offset: int,
    ) -> Page: ...

    async def get_change_request(
        self, project_id: int, request_id: int
    ) -> ChangeRequest | None: ...

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None: ...


class ApprovalStore(ApprovalReads, HoldStore, Protocol):
    """Changing the policy, holding writes and deciding them."""

    async def set_approval_policy(
        self, project_id: int, enabled: bool, source: ChangeSource, now_ms: int
    ) -> ApprovalPolicy: ...

    async def decide_change_request(
        self,
        decided: ChangeRequest,
        flag_key: str,
        source: ChangeSource,
        apply_source: ChangeSource | None = None,
    ) -> ChangeRequest: ...


class Held(msgspec.Struct, frozen=True):
    """The write waits for approval: the change request it became (as the API shows it)."""

    request: dict[str, Any]


class Unchanged(msgspec.Struct, frozen=True):
    """Under the policy, a write that would change nothing anyone sees: the flag as it is."""

    flag: FeatureFlag


class RequestWithFlag(msgspec.Struct, frozen=True):
    """A change request and its flag as it is now (``None``: none, or not read because the
    request is decided), from which the API shows what approving would change."""

    request: ChangeRequest
    current: FeatureFlag | None


class RequestPage(msgspec.Struct, frozen=True):
    """How many change requests match, and one page of them."""

    count: int
    results: list[RequestWithFlag]


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


def request_with_flag_json(shown: RequestWithFlag) -> dict[str, Any]:
    current = shown.current
    return request_json(shown.request, flag_json(current) if current is not None else None)


def policy_json(policy: approvals.ApprovalPolicy) -> dict[str, Any]:
    return {
        "enabled": policy.enabled,
        "updated_at": ms_to_iso(policy.updated_at_ms) if policy.updated_at_ms else None,
        "updated_by": {"id": policy.updated_by} if policy.updated_by is not None else None,
    }


def policy_input(body: Any) -> ApprovalPolicyInput:
    """The body of a policy change: ``enabled`` must be there, true or false."""
    try:
        return decode(ApprovalPolicyInput, body)
    except ApiError as refused:
        if refused.attr != "enabled":
            raise
        raise ApiError(400, "required", "enabled (true or false) is required", "enabled") from None


async def current_policy(store: ApprovalReads, project_id: int) -> ApprovalPolicy:
    """The project's approval policy, as it is."""
    return await store.approval_policy(project_id)


async def change_requests(
    store: ApprovalReads,
    project_id: int,
    status: RequestStatus | None,
    flag_id: int | None,
    limit: int,
    offset: int,
) -> Page:
    """The project's change requests, newest first (``status`` and ``flag_id`` filtering):
    how many, and one page, as stored."""
    return await store.list_change_requests(project_id, status, flag_id, limit, offset)


async def get_policy(caller: Caller[ApprovalStore]) -> ApprovalPolicy:
    return await current_policy(caller.store, caller.project_id)


async def set_policy(caller: Caller[ApprovalStore], body: ApprovalPolicyInput) -> ApprovalPolicy:
    """Turn approval of flag changes on or off (admins: the adapter authorises)."""
    return await caller.store.set_approval_policy(
        caller.project_id, body.enabled, caller.source, clock.now_ms()
    )


# holding a write for approval --------------------------------------------------------------


async def _hold(
    caller: Caller[HoldStore],
    flag: FeatureFlag,
    kind: RequestKind,
    body: dict[str, Any],
    base_version: int | None,
) -> Held | None:
    """Store the write as a pending request when the project's policy is on; None when the
    write may go ahead."""
    policy = await caller.store.approval_policy(caller.project_id)
    if not policy.enabled:
        return None
    principal = caller.principal
    request = ChangeRequest(
        id=0,
        project_id=caller.project_id,
        flag_id=flag.id,
        body=body,
        base_version=base_version,
        author_user_id=principal.user_id,
        author_key_id=principal.key_id if principal.user_id is None else None,
        status=RequestStatus.PENDING,
        created_at_ms=clock.now_ms(),
        kind=kind,
    )
    made = await caller.store.create_change_request(request, flag.key, caller.source)
    return Held(request_json(made, flag_json(flag)))


async def hold_flag_write(
    caller: Caller[HoldStore], current: FeatureFlag, flag: FlagDefinition
) -> Held | Unchanged | None:
    """Before a flag update or delete: :class:`Held` when it must wait for approval,
    :class:`Unchanged` when under the policy it would change nothing anyone sees. The request's
    body is the whole flag to write, with the version it replaces."""
    kind = RequestKind.DELETE if flag.deleted and not current.deleted else None
    before = flag_json(current)
    after = {**before, **flag_json(flag), "version": current.version}
    if not changes_between(Scope.FEATURE_FLAG, before, after):
        policy = await caller.store.approval_policy(caller.project_id)
        return Unchanged(current) if policy.enabled else None
    return await _hold(caller, current, kind or RequestKind.UPDATE, after, current.version)


async def hold_schedule(
    caller: Caller[HoldStore],
    flag: FeatureFlag,
    operation: Operation,
    payload: dict[str, Any],
    run_at_ms: int,
) -> Held | None:
    """Before a scheduled change is created: :class:`Held` when it must wait for approval
    (approval is given at scheduling time; the change then runs when due)."""
    body = {"operation": operation.value, "payload": payload, "run_at_ms": run_at_ms}
    return await _hold(caller, flag, RequestKind.SCHEDULE, body, None)


# change requests ----------------------------------------------------------------------------


async def current_flag(caller: Caller[ApprovalStore], request: ChangeRequest) -> FeatureFlag | None:
    if request.flag_id is None:
        return None
    return await caller.store.get_flag(caller.project_id, request.flag_id)


async def list_requests(
    caller: Caller[ApprovalStore],
    status: RequestStatus | None,
    flag_id: int | None,
    limit: int,
    offset: int,
) -> RequestPage:
    """Newest first, ``status`` and ``flag_id`` filtering: the total and one page, pending
    requests with their flag as it is now (what approving would change)."""
    page = await change_requests(caller.store, caller.project_id, status, flag_id, limit, offset)
    flags: dict[int | None, FeatureFlag | None] = {}
    results = []
    for found in page.results:
        if found.status is RequestStatus.PENDING and found.flag_id not in flags:
            flags[found.flag_id] = await current_flag(caller, found)
        results.append(RequestWithFlag(found, flags.get(found.flag_id)))
    return RequestPage(page.count, results)


async def get_request(caller: Caller[ApprovalStore], request_id: int) -> RequestWithFlag:
    found = await existing_request(caller, request_id)
    return RequestWithFlag(found, await current_flag(caller, found))


async def existing_request(caller: Caller[ApprovalStore], request_id: int) -> ChangeRequest:
    found = await caller.store.get_change_request(caller.project_id, request_id)
    return existing(found, "change request")


def _refused(found: ChangeRequest, problem: str) -> ApiError:
    if found.status is not RequestStatus.PENDING:
        return ApiError(409, "already_decided", problem)
    return ApiError(403, "permission_denied", problem)


def _flag_key(found: ChangeRequest, current: FeatureFlag | None) -> str:
    if current is not None:
        return current.key
    return str(found.body.get("key", found.flag_id))


async def _mark_stale(
    caller: Caller[ApprovalStore], decided: ChangeRequest, key: str, reason: str
) -> None:
    stale = msgspec.structs.replace(decided, status=RequestStatus.STALE)
    with contextlib.suppress(Conflict):  # decided meanwhile by someone else: theirs stands
        await caller.store.decide_change_request(stale, key, caller.source)
    raise ApiError(409, "stale", reason)


async def approve(
    caller: Caller[ApprovalStore], request_id: int, body: DecisionInput
) -> ChangeRequest:
    """Apply the request now: its author cannot, nor can a viewer."""
    comment = body.comment
    found = await existing_request(caller, request_id)
    current = await current_flag(caller, found)
    live = current if current is not None and not current.deleted else None
    now = clock.now_ms()
    decision = approvals.approve(found, caller.principal, live.version if live else None, now)
    key = _flag_key(found, current)
    if decision.problem is not None:
        if decision.request.status is RequestStatus.STALE:
            await _mark_stale(caller, decision.request, key, decision.problem)
        raise _refused(found, decision.problem)
    decided = msgspec.structs.replace(decision.request, comment=comment)
    author = Actor(user_id=found.author_user_id)
    apply_source = ChangeSource(actor=author, trigger=decision.trigger)
    try:
        done = await caller.store.decide_change_request(decided, key, caller.source, apply_source)
    except Conflict as exc:
        if exc.field == "version":  # the flag moved between our read and the write
            await _mark_stale(caller, decided, key, "the flag changed since this request was made")
        if exc.field == "status":
            raise ApiError(409, "already_decided", exc.message) from None
        raise
    return done


async def reject(
    caller: Caller[ApprovalStore], request_id: int, body: DecisionInput
) -> ChangeRequest:
    """Refuse the request (anyone who may approve it), or withdraw it (its author)."""
    found = await existing_request(caller, request_id)
    decision = approvals.reject(found, caller.principal, body.comment, clock.now_ms())
    if decision.problem is not None:
        raise _refused(found, decision.problem)
    key = _flag_key(found, await current_flag(caller, found))
    try:
        done = await caller.store.decide_change_request(decision.request, key, caller.source)
    except Conflict as exc:
        raise ApiError(409, "already_decided", exc.message) from None
    return done
