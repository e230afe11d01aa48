"""Row mapping for approval policies and change requests, shared by both engines."""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.activity.approvals import ApprovalPolicy, ChangeRequest, RequestKind, RequestStatus

_decode = msgspec.json.decode

REQUEST_COLUMNS = (
    "id, project_id, flag_id, body, base_version, author_user_id, status, created_at_ms, "
    "decided_by, decided_at_ms, comment, kind, author_key_id"
)
POLICY_COLUMNS = "enabled, updated_at_ms, updated_by"


def request_record(row: Any) -> ChangeRequest:
    body = row[3] if isinstance(row[3], dict) else _decode(row[3])
    return ChangeRequest(
        id=int(row[0]),
        project_id=int(row[1]),
        flag_id=row[2],
        body=body,
        base_version=row[4],
        author_user_id=row[5],
        status=RequestStatus(row[6]),
        created_at_ms=int(row[7]),
        decided_by=row[8],
        decided_at_ms=row[9],
        comment=row[10],
        kind=RequestKind(row[11]),
        author_key_id=row[12],
    )


def policy_record(row: Any | None) -> ApprovalPolicy:
    if row is None:
        return ApprovalPolicy()
    return ApprovalPolicy(enabled=bool(row[0]), updated_at_ms=row[1], updated_by=row[2])


def request_activity(request: ChangeRequest, flag_key: str) -> dict[str, Any]:
    """What the activity log keeps of a change request (scope ChangeRequest)."""
    return {
        "name": f"{request.kind.value} {flag_key}",
        "flag_id": request.flag_id,
        "flag_key": flag_key,
        "kind": request.kind.value,
        "status": request.status.value,
        "comment": request.comment or None,
    }


def decision_activity(
    decided: ChangeRequest, flag_key: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Before and after of a decided request, for its activity record."""
    pending = msgspec.structs.replace(decided, status=RequestStatus.PENDING, comment="")
    return request_activity(pending, flag_key), request_activity(decided, flag_key)
