"""Approval before a change goes live: a change request waits until a second person approves.

Pure. With a project's policy enabled, a flag change by an editor is stored as a pending
:class:`ChangeRequest` (its validated body and the flag version it was made from) instead of
being applied; approving applies it through the ordinary update path, unless the flag changed
meanwhile (then the request is stale and must be made again).
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from flagstaff.accounts.roles import Principal, can_approve
from flagstaff.activity.records import Trigger


class RequestStatus(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    APPLIED = "applied"
    STALE = "stale"


class ApprovalPolicy(msgspec.Struct, frozen=True):
    """With ``enabled``, every flag change waits for a second person, whoever makes it
    (admins included): the point is a second pair of eyes."""

    enabled: bool = False


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


class Decision(msgspec.Struct, frozen=True):
    """What to store after a decision; ``apply`` is True when the body must be applied now
    (in the same transaction that marks the request applied)."""

    request: ChangeRequest
    apply: bool
    problem: str | None = None  # set when the decision was refused (answered 400/403)
    trigger: Trigger | None = None


def approve(
    request: ChangeRequest, principal: Principal, current_version: int | None, now_ms: int
) -> Decision:
    if request.status is not RequestStatus.PENDING:
        return Decision(request, False, f"the request is already {request.status.value}")
    problem = can_approve(principal, request.author_user_id)
    if problem is not None:
        return Decision(request, False, problem)
    decided = msgspec.structs.replace(request, decided_by=principal.user_id, decided_at_ms=now_ms)
    if request.flag_id is not None and current_version != request.base_version:
        stale = msgspec.structs.replace(decided, status=RequestStatus.STALE)
        return Decision(stale, False, "the flag changed since this request was made")
    applied = msgspec.structs.replace(decided, status=RequestStatus.APPLIED)
    trigger = Trigger(
        job_type="approval",
        job_id=str(request.id),
        payload={"approved_by": principal.user_id, "author": request.author_user_id},
    )
    return Decision(applied, True, None, trigger)


def reject(request: ChangeRequest, principal: Principal, comment: str, now_ms: int) -> Decision:
    if request.status is not RequestStatus.PENDING:
        return Decision(request, False, f"the request is already {request.status.value}")
    problem = can_approve(principal, None)  # an author may withdraw their own request
    if problem is not None and principal.user_id != request.author_user_id:
        return Decision(request, False, problem)
    rejected = msgspec.structs.replace(
        request,
        status=RequestStatus.REJECTED,
        decided_by=principal.user_id,
        decided_at_ms=now_ms,
        comment=comment[:1000],
    )
    return Decision(rejected, False)
