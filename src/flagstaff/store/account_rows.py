"""Row mapping and queries for accounts and the activity log that both engines share."""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.accounts.records import ApiKeyInfo, Role, Session, User
from flagstaff.activity.records import (
    Activity,
    ActivityRecord,
    Actor,
    Detail,
    Scope,
    StoredActivity,
)
from flagstaff.activity.scheduled import Operation, ScheduledChange

_decode = msgspec.json.decode
USER_COLUMNS = (
    "id, email, password_hash, created_at_ms, is_active, first_name, last_login_ms, "
    "break_glass, oidc_issuer"
)
KEY_COLUMNS = (
    "id, project_id, label, prefix, mask, COALESCE(created_at_ms, 0), user_id, last_used_ms, "
    "revoked_at_ms"
)
SESSION_COLUMNS = (
    "id, user_id, token_hash, created_at_ms, last_seen_ms, expires_at_ms, ip, user_agent"
)
ACTIVITY_COLUMNS = (
    "a.id, a.uuid, a.project_id, a.scope, a.item_id, a.activity, a.user_id, a.is_system, "
    "a.detail, a.created_at_ms, COALESCE(u.email, ''), COALESCE(u.first_name, '')"
)


def user_record(row: Any) -> User:
    return User(row[0], row[1], row[2], row[3], bool(row[4]), row[5], row[6], bool(row[7]), row[8])


def membership_detail(email: str, role: Role | None) -> dict[str, Any] | None:
    """A membership as its activity record shows it (None: not a member)."""
    return None if role is None else {"name": email, "role": role.value}


def key_record(row: Any) -> ApiKeyInfo:
    return ApiKeyInfo(*row)


def session_record(row: Any) -> Session:
    return Session(*row)


def activity_record(row: Any) -> StoredActivity:
    """A row of :data:`ACTIVITY_COLUMNS` (both engines select the same columns)."""
    (id_, uuid_, project_id, scope, item_id, activity, user_id, is_system, detail, at) = row[:10]
    email, first_name = row[10], row[11]
    parsed = detail if isinstance(detail, dict) else _decode(detail)
    return StoredActivity(
        id=int(id_),
        uuid=str(uuid_),
        record=ActivityRecord(
            project_id=project_id,
            scope=Scope(scope),
            item_id=item_id,
            activity=Activity(activity),
            actor=Actor(
                user_id=user_id, email=email, first_name=first_name, is_system=bool(is_system)
            ),
            detail=msgspec.convert(parsed, Detail),
            created_at_ms=at,
        ),
    )


def activity_filter(
    project_id: int,
    scope: Scope | None,
    item_id: str | None,
    user_id: int | None,
    before_id: int | None,
) -> tuple[str, list[Any]]:
    """The WHERE clause of an activity query and its arguments (``$1``...)."""
    clauses = ["a.project_id = {}"]
    args: list[Any] = [project_id]
    for column, value in (
        ("a.scope", scope.value if scope else None),
        ("a.item_id", item_id),
        ("a.user_id", user_id),
    ):
        if value is not None:
            clauses.append(f"{column} = {{}}")
            args.append(value)
    if before_id is not None:
        clauses.append("a.id < {}")
        args.append(before_id)
    marks = [f"${i + 1}" for i in range(len(args))]
    return " AND ".join(c.format(m) for c, m in zip(clauses, marks, strict=True)), args


SCHEDULED_COLUMNS = (
    "id, project_id, flag_id, operation, payload, run_at_ms, created_by, created_at_ms, "
    "executed_at_ms, failure"
)


def scheduled_record(row: Any) -> ScheduledChange:
    payload = row[4] if isinstance(row[4], dict) else _decode(row[4])
    return ScheduledChange(
        id=int(row[0]),
        project_id=int(row[1]),
        flag_id=int(row[2]),
        operation=Operation(row[3]),
        payload=payload,
        run_at_ms=int(row[5]),
        created_by=row[6],
        created_at_ms=int(row[7]),
        executed_at_ms=row[8],
        failure=row[9],
    )
