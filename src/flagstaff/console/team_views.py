"""What the console's team pages show (members, cohorts, groups, ingestion warnings, project
settings), computed from plain data. No I/O, no HTML."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import msgspec

from flagstaff.accounts.records import Role
from flagstaff.application.accounts import Member
from flagstaff.console.views import FilterModel, filter_model
from flagstaff.ingest import validate
from flagstaff.store.base import Usage, Warning
from flagstaff.store.records import Cohort

# members -----------------------------------------------------------------------------------


class MemberRow(msgspec.Struct, frozen=True):
    user_id: int
    email: str
    role: str
    joined_ms: int
    last_login_ms: int | None
    is_you: bool
    single_sign_on: bool = False


def member_rows(members: Iterable[Member], me: int) -> list[MemberRow]:
    """Members by email."""
    rows = [
        MemberRow(
            member.user.id,
            member.user.email,
            member.membership.role.value,
            member.membership.created_at_ms,
            member.user.last_login_ms,
            member.user.id == me,
            member.user.oidc_issuer is not None,
        )
        for member in members
    ]
    return sorted(rows, key=lambda r: r.email)


def admins(rows: Iterable[MemberRow]) -> int:
    return sum(1 for r in rows if r.role == Role.ADMIN.value)


ROLE_CHOICES: tuple[tuple[str, str], ...] = (
    (Role.VIEWER.value, "Viewer: sees everything, changes nothing"),
    (Role.EDITOR.value, "Editor: changes flags and cohorts"),
    (Role.ADMIN.value, "Admin: also manages members and settings"),
)


# cohorts -----------------------------------------------------------------------------------


class DynamicCounts(msgspec.Struct, frozen=True):
    """Persons matching each dynamic cohort among the first ``scanned`` persons."""

    counts: dict[int, int]
    failed: frozenset[int]
    """Cohorts that cannot be evaluated (a missing or cyclic cohort reference)."""
    scanned: int
    complete: bool
    """Every person was checked (otherwise the counts are lower bounds)."""


NO_COUNTS = DynamicCounts({}, frozenset(), 0, True)


class CohortRow(msgspec.Struct, frozen=True):
    id: int
    name: str
    description: str
    is_static: bool
    count: str


def _number(n: int) -> str:
    return f"{n:,}"


def count_text(cohort: Cohort, dynamic: DynamicCounts) -> str:
    """A cohort's size as the list shows it: stored members for a static cohort, matching
    persons for a dynamic one (a lower bound when not every person was checked)."""
    if cohort.is_static:
        return _number(cohort.count)
    cohort_id = cohort.id
    if cohort_id in dynamic.failed:
        return "cannot be evaluated"
    n = dynamic.counts.get(cohort_id)
    if n is None:
        return "not counted"
    if dynamic.complete:
        return _number(n)
    return f"at least {_number(n)} (first {_number(dynamic.scanned)} persons checked)"


def cohort_rows(cohorts: Iterable[Cohort], dynamic: DynamicCounts) -> list[CohortRow]:
    """Cohorts not deleted, by name."""
    rows = [
        CohortRow(
            id=c.id,
            name=c.name or f"Cohort {c.id}",
            description=c.description or "",
            is_static=c.is_static,
            count=count_text(c, dynamic),
        )
        for c in cohorts
        if not c.deleted
    ]
    return sorted(rows, key=lambda r: (r.name.lower(), r.id))


COHORT_FILTER_TYPES: tuple[tuple[str, str], ...] = (
    ("person", "Person property"),
    ("cohort", "Cohort"),
)


class CohortEditorModel(msgspec.Struct, frozen=True):
    id: int | None
    name: str
    description: str
    is_static: bool
    conditions: list[list[FilterModel]]
    """Condition sets: a person matches when every filter of some set matches."""
    editable: bool
    """The filters fit the builder (sets of person and cohort filters, no negation)."""
    filters_json: str
    version: int | None


def _leaf(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and "values" not in entry
        and entry.get("type", "person") in ("person", "cohort")
        and not entry.get("negation")
    )


def _condition_sets(group: Any) -> list[list[dict[str, Any]]] | None:
    """OR of ANDs (or one AND, or one OR of filters) as condition sets; None otherwise."""
    if group is None:
        return []
    if not isinstance(group, dict) or group.get("type") not in ("AND", "OR"):
        return None
    values = group.get("values")
    if not isinstance(values, list):
        return None
    if all(_leaf(v) for v in values):
        return [values] if group["type"] == "AND" else [[v] for v in values]
    if group["type"] != "OR":
        return None
    sets = []
    for value in values:
        inner = _condition_sets(value) if isinstance(value, dict) and "values" in value else None
        if inner is None or len(inner) > 1 or (inner and value.get("type") != "AND"):
            return None
        sets.extend(inner)
    return sets


def cohort_editor_model(cohort: Cohort | None) -> CohortEditorModel:
    """The cohort editor's fields (None: a new dynamic cohort with one empty condition set)."""
    if cohort is None:
        return CohortEditorModel(None, "", "", False, [[]], True, "", None)
    filters = cohort.filters or {}
    group = filters.get("properties")
    sets = _condition_sets(group)
    conditions = [[filter_model(p) for p in s] for s in sets or []]
    return CohortEditorModel(
        id=cohort.id,
        name=cohort.name,
        description=cohort.description or "",
        is_static=cohort.is_static,
        conditions=conditions or [[]],
        editable=sets is not None,
        filters_json=msgspec.json.format(msgspec.json.encode(group)).decode() if group else "",
        version=cohort.version,
    )


# ingestion warnings ------------------------------------------------------------------------

WARNING_LABELS: dict[str, str] = {
    validate.MISSING_EVENT_NAME: "Event without a name",
    validate.MISSING_DISTINCT_ID: "Event without a distinct id",
    validate.EMPTY_DISTINCT_ID: "Empty or reserved distinct id",
    validate.MISSING_SURVEY_ID: "Survey event without a survey id",
    validate.INVALID_GROUP_TYPE: "Invalid group type",
    validate.INVALID_GROUP_KEY: "Invalid group key",
    validate.HISTORICAL_TIMESTAMP_TOO_RECENT: "Historical event too recent",
    validate.HISTORICAL_MISSING_TIMESTAMP: "Historical event without a timestamp",
    validate.PERSON_EVENT_WITHOUT_PROFILE: "Person event with person processing off",
    validate.EVENT_TOO_LARGE: "Event too large",
    validate.INVALID_EVENT: "Not a valid event",
    "event_quota_exceeded": "Over the event quota",
    "invalid_group_identify": "Invalid group identify",
    "group_type_limit_reached": "Too many group types",
    "cannot_merge_with_illegal_distinct_id": "Merge refused: illegal distinct id",
    "cannot_merge_already_identified": "Merge refused: both persons identified",
}


def warning_label(kind: str) -> str:
    return WARNING_LABELS.get(kind, kind.replace("_", " ").capitalize())


class WarningRow(msgspec.Struct, frozen=True):
    id: int
    type: str
    label: str
    when_ms: int
    detail: str
    event: str
    distinct_id: str


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def warning_rows(warnings: Iterable[Warning]) -> list[WarningRow]:
    rows = []
    for w in warnings:
        details = w.details if isinstance(w.details, dict) else {}
        known = {"reason", "detail", "event", "distinct_id", "eventUuid", "digest"}
        extra = {k: v for k, v in details.items() if k not in known}
        detail = _text(details.get("detail")) or ", ".join(
            f"{k}: {_text(v)}" for k, v in sorted(extra.items())
        )
        rows.append(
            WarningRow(
                id=w.id,
                type=w.type,
                label=warning_label(w.type),
                when_ms=w.created_at_ms,
                detail=detail,
                event=_text(details.get("event")),
                distinct_id=_text(details.get("distinct_id") or details.get("distinctId")),
            )
        )
    return rows


def warning_summary(warnings: Iterable[Warning]) -> list[tuple[str, str, int]]:
    """(type, label, count) of the warnings given, most frequent first."""
    counts = Counter(w.type for w in warnings)
    return [(kind, warning_label(kind), n) for kind, n in counts.most_common()]


# project settings --------------------------------------------------------------------------


class Figure(msgspec.Struct, frozen=True):
    label: str
    value: str


def usage_figures(usage: Usage, flag_quota: int, event_quota: int) -> list[Figure]:
    """The project's counts and quotas in words (a capped count says "or more")."""

    def capped(n: int) -> str:
        return f"{_number(n)} or more" if n >= usage.cap else _number(n)

    def quota(n: int, what: str) -> str:
        return f"{_number(n)} {what} per minute" if n else "no quota"

    return [
        Figure("Events stored", capped(usage.events)),
        Figure("Persons", capped(usage.persons)),
        Figure("Feature flags", _number(usage.flags)),
        Figure("Cohorts", _number(usage.cohorts)),
        Figure("Flag request quota", quota(flag_quota, "requests")),
        Figure("Event quota", quota(event_quota, "events")),
    ]
