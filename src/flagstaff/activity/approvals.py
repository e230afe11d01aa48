"""Approval before a change goes live: a change request waits until a second person approves.

Pure. With a project's policy enabled, a flag change (an update, a delete, a rollback, a
scheduled change) is stored as a pending :class:`ChangeRequest` (the validated flag it would
write and the flag version it was made from) instead of being applied; approving applies it
through the ordinary update path, unless the flag changed meanwhile (then the request is stale
and must be made again). Approving a scheduled change creates it: approval is given at
scheduling time, and the change then runs unattended when due.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from flagstaff.accounts.roles import Action, Principal, can_approve, permission_problem
from flagstaff.activity.records import Trigger

APPROVAL_JOB = "approval"
"""``detail.trigger.job_type`` of a change applied by an approval."""
MAX_COMMENT = 1000


class RequestStatus(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    APPLIED = "applied"
    STALE = "stale"


class RequestKind(enum.StrEnum):
    UPDATE = "update"  # PATCH, PUT, rollback: body is the whole flag to write
    DELETE = "delete"  # body is the whole flag with deleted: true
    SCHEDULE = "schedule"  # body is {"operation", "payload", "run_at_ms"}


class ApprovalPolicy(msgspec.Struct, frozen=True):
    """With ``enabled``, every flag change waits for a second person, whoever makes it
    (admins included): the point is a second pair of eyes."""

    enabled: bool = False
    updated_at_ms: int | None = None
    updated_by: int | None = None


class ChangeRequest(msgspec.Struct, frozen=True):
    id: int
    project_id: int
    flag_id: int | None  # None: a flag to be created
    body: dict[str, Any]
    base_version: int | None
    author_user_id: int | None
    status: RequestStatus
    created_at_ms: int
    decided_by: int | None = None
    decided_at_ms: int | None = None
    comment: str = ""
    kind: RequestKind = RequestKind.UPDATE
    author_key_id: int | None = None
    """The personal key that made it when its author has no user (a bootstrap key)."""


class Decision(msgspec.Struct, frozen=True):
    """What to store after a decision; ``apply`` is True when the body must be applied now
    (in the same transaction that marks the request applied)."""

    request: ChangeRequest
    apply: bool
    problem: str | None = None  # set when the decision was refused (answered 400/403)
    trigger: Trigger | None = None


def stale_reason(request: ChangeRequest, current_version: int | None, now_ms: int) -> str | None:
    """Why the request can no longer be applied as it was reviewed, or None."""
    if request.kind is RequestKind.SCHEDULE:
        if int(request.body.get("run_at_ms") or 0) <= now_ms:
            return "the scheduled time has passed; schedule the change again"
        return None if current_version is not None else "the flag was deleted"
    if request.flag_id is not None and current_version != request.base_version:
        return "the flag changed since this request was made"
    return None


def approve(
    request: ChangeRequest,
    principal: Principal,
    current_version: int | None,
    now_ms: int,
) -> Decision:
    """``current_version``: the flag's version now (None when it is gone)."""
    if request.status is not RequestStatus.PENDING:
        return Decision(request, False, f"the request is already {request.status.value}")
    problem = can_approve(principal, request.author_user_id, request.author_key_id)
    if problem is not None:
        return Decision(request, False, problem)
    decided = msgspec.structs.replace(request, decided_by=principal.user_id, decided_at_ms=now_ms)
    stale = stale_reason(request, current_version, now_ms)
    if stale is not None:
        return Decision(msgspec.structs.replace(decided, status=RequestStatus.STALE), False, stale)
    applied = msgspec.structs.replace(decided, status=RequestStatus.APPLIED)
    trigger = Trigger(
        job_type=APPROVAL_JOB,
        job_id=str(request.id),
        payload={
            "approved_by": principal.user_id,
            "approved_by_email": principal.email,
            "author": request.author_user_id,
        },
    )
    return Decision(applied, True, None, trigger)


def is_author(request: ChangeRequest, principal: Principal) -> bool:
    """Whether ``principal`` made ``request`` (the same user, or the same user-less key)."""
    if principal.user_id is not None:
        return principal.user_id == request.author_user_id
    return request.author_user_id is None and principal.key_id == request.author_key_id


def reject(request: ChangeRequest, principal: Principal, comment: str, now_ms: int) -> Decision:
    """Refuse a request, or withdraw it (its author may, whatever their role)."""
    if request.status is not RequestStatus.PENDING:
        return Decision(request, False, f"the request is already {request.status.value}")
    problem = permission_problem(principal, Action.APPROVE)
    if problem is not None and not is_author(request, principal):
        return Decision(request, False, problem)
    rejected = msgspec.structs.replace(
        request,
        status=RequestStatus.REJECTED,
        decided_by=principal.user_id,
        decided_at_ms=now_ms,
        comment=comment[:MAX_COMMENT],
    )
    return Decision(rejected, False)
