"""What the console's pages show, computed from plain data (the flag JSON the management API
returns): flag rows, list filters, staleness, and the editor's model. No I/O, no HTML."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from flagstaff.activity.approvals import APPROVAL_JOB
from flagstaff.activity.readable import DiffLine, readable_changes
from flagstaff.activity.records import StoredActivity
from flagstaff.activity.rollback import FlagVersion
from flagstaff.common.clock import iso_to_ms
from flagstaff.common.units import DAY_MS
from flagstaff.flags.operators import (
    COHORT_OPERATORS,
    DATE_OPERATORS,
    EQUALITY_OPERATORS,
    FLAG_OPERATORS,
    MULTI_OPERATORS,
    NUMERIC_OPERATORS,
    RANGE_OPERATORS,
    REGEX_OPERATORS,
    SEMVER_COMPARISONS,
    SEMVER_RANGES,
    SET_OPERATORS,
    TEXT_OPERATORS,
)
from flagstaff.flags.records import FeatureFlag, FlagDefinition

STALE_AFTER_MS = 30 * DAY_MS


class FlagType(enum.StrEnum):
    BOOLEAN = "boolean"
    MULTIVARIATE = "multivariate"
    REMOTE_CONFIG = "remote_config"


class FlagUsage(msgspec.Struct, frozen=True):
    """Checks of one flag, from ``$feature_flag_called`` events."""

    checks_per_day: float = 0.0  # mean over the last 30 days
    last_seen_ms: int | None = None
    daily: tuple[int, ...] = ()  # checks per day of the last 30 days, oldest first


NO_USAGE = FlagUsage()

LIVE_EVENT_ROWS = 100


class ScheduledRow(msgspec.Struct, frozen=True):
    id: int
    run_at_ms: int
    description: str
    executed_at_ms: int | None
    failure: str | None


def describe_scheduled(payload: dict[str, Any]) -> str:
    """A scheduled change's payload in words."""
    operation, value = payload.get("operation"), payload.get("value")
    if operation == "update_status":
        return "Turn the flag on" if value else "Turn the flag off"
    if operation == "update_rollout":
        group = payload.get("group")
        where = "every condition set" if group is None else f"condition set {group + 1}"
        return f"Set the rollout of {where} to {value}%"
    if operation == "add_release_condition":
        return "Add release conditions"
    if operation == "update_variants":
        return "Replace the variants"
    return str(operation)


PERSON_EVENT_ROWS = 25


class PersonFlag(msgspec.Struct, frozen=True):
    """One flag's value for a person right now, and why (the explainer's reason)."""

    id: int
    key: str
    enabled: bool
    variant: str | None
    reason: str


def property_rows(properties: dict[str, Any]) -> list[tuple[str, str]]:
    """Properties as (name, shown value), sorted by name; non-strings as JSON."""
    return [
        (name, value if isinstance(value, str) else msgspec.json.encode(value).decode())
        for name, value in sorted(properties.items())
    ]


def json_object(text: str, what: str) -> dict[str, Any]:
    """A typed JSON object from a form field (empty: none); ValueError names the problem."""
    if not text.strip():
        return {}
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        raise ValueError(f"{what} are not valid JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object")
    return value


class EventRow(msgspec.Struct, frozen=True):
    """One line of the live events page."""

    uuid: str
    event: str
    distinct_id: str
    timestamp: str
    summary: str


def event_summary(properties: dict[str, Any]) -> str:
    """The page URL, or the first few non-``$`` properties (as the page's script shows them)."""
    url = properties.get("$current_url")
    if url:
        return str(url)
    shown = [
        f"{k}={v if isinstance(v, str) else msgspec.json.encode(v).decode()}"
        for k, v in properties.items()
        if not k.startswith("$")
    ][:4]
    return ", ".join(shown)


OPERATOR_LABELS: dict[str, str] = {
    "exact": "equals",
    "is_not": "does not equal",
    "icontains": "contains",
    "not_icontains": "does not contain",
    "starts_with": "starts with",
    "not_starts_with": "does not start with",
    "ends_with": "ends with",
    "not_ends_with": "does not end with",
    "regex": "matches regex",
    "not_regex": "does not match regex",
    "gt": "greater than",
    "gte": "greater than or equal to",
    "lt": "less than",
    "lte": "less than or equal to",
    "between": "between",
    "not_between": "not between",
    "is_set": "is set",
    "is_not_set": "is not set",
    "is_date_before": "date before",
    "is_date_after": "date after",
    "is_date_exact": "date is",
    "semver_eq": "version equals",
    "semver_neq": "version does not equal",
    "semver_gt": "version greater than",
    "semver_gte": "version greater than or equal to",
    "semver_lt": "version less than",
    "semver_lte": "version less than or equal to",
    "semver_tilde": "version ~ (tilde range)",
    "semver_caret": "version ^ (caret range)",
    "semver_wildcard": "version wildcard (1.2.*)",
    "icontains_multi": "contains any of",
    "not_icontains_multi": "contains none of",
    "in": "in cohort",
    "not_in": "not in cohort",
    "flag_evaluates_to": "evaluates to",
}

# Property operators in the order the builder offers them, grouped for <optgroup>.
PROPERTY_OPERATOR_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Equality", tuple(sorted(EQUALITY_OPERATORS))),
    ("Text", tuple(sorted(TEXT_OPERATORS | MULTI_OPERATORS))),
    ("Regular expression", tuple(sorted(REGEX_OPERATORS))),
    ("Number", tuple(sorted(NUMERIC_OPERATORS | RANGE_OPERATORS))),
    ("Presence", tuple(sorted(SET_OPERATORS))),
    ("Date", tuple(sorted(DATE_OPERATORS))),
    ("Version", tuple(sorted(SEMVER_COMPARISONS | SEMVER_RANGES))),
)
COHORT_OPERATOR_CHOICES = tuple(sorted(COHORT_OPERATORS))
FLAG_OPERATOR_CHOICES = tuple(sorted(FLAG_OPERATORS))
LIST_VALUE_OPERATORS = EQUALITY_OPERATORS | MULTI_OPERATORS
FILTER_TYPES: tuple[tuple[str, str], ...] = (
    ("person", "Person property"),
    ("group", "Group property"),
    ("cohort", "Cohort"),
    ("flag", "Another flag"),
)


# the flags list ----------------------------------------------------------------------------


def flag_type(flag: Mapping[str, Any]) -> FlagType:
    if flag.get("is_remote_configuration"):
        return FlagType.REMOTE_CONFIG
    multivariate = (flag.get("filters") or {}).get("multivariate") or {}
    if multivariate.get("variants"):
        return FlagType.MULTIVARIATE
    return FlagType.BOOLEAN


def _time_ms(text: Any) -> int | None:
    return iso_to_ms(text) if isinstance(text, str) and text else None


def fully_rolled_out(flag: Mapping[str, Any]) -> bool:
    """On for everyone: active, and some condition set without properties at 100% (or no
    rollout given), with no variants to choose between."""
    if not flag.get("active") or flag_type(flag) is FlagType.MULTIVARIATE:
        return False
    for group in (flag.get("filters") or {}).get("groups") or []:
        rollout = group.get("rollout_percentage")
        if not group.get("properties") and (rollout is None or rollout >= 100):
            return True
    return False


def stale_reason(flag: Mapping[str, Any], usage: FlagUsage, now_ms: int) -> str | None:
    """Why the flag is stale, or None: no checks for 30 days, or on for everyone for 30 days
    (a flag younger than 30 days is never stale)."""
    created = _time_ms(flag.get("created_at"))
    if created is not None and now_ms - created < STALE_AFTER_MS:
        return None
    if usage.last_seen_ms is None or now_ms - usage.last_seen_ms >= STALE_AFTER_MS:
        return "not checked for 30 days"
    updated = _time_ms(flag.get("updated_at")) or created
    if fully_rolled_out(flag) and updated is not None and now_ms - updated >= STALE_AFTER_MS:
        return "at 100% for 30 days"
    return None


def rollout_summary(flag: Mapping[str, Any]) -> str:
    groups = (flag.get("filters") or {}).get("groups") or []
    if not groups:
        return "no release conditions"
    parts = []
    for group in groups:
        rollout = group.get("rollout_percentage")
        who = (
            "everyone"
            if not group.get("properties")
            else (
                f"{len(group['properties'])} filter" + ("s" if len(group["properties"]) > 1 else "")
            )
        )
        parts.append(f"{100 if rollout is None else rollout:g}% of {who}")
    return "; ".join(parts)


class ListFilters(msgspec.Struct, frozen=True):
    search: str = ""
    active: str = ""  # "", "true", "false"
    type: str = ""  # "", or a FlagType value
    tag: str = ""
    stale: str = ""  # "", "true", "false"

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> ListFilters:
        def pick(name: str, allowed: Iterable[str] | None = None) -> str:
            value = (query.get(name) or "").strip()
            if allowed is not None and value not in allowed:
                return ""
            return value[:200]

        return cls(
            search=pick("search"),
            active=pick("active", ("true", "false")),
            type=pick("type", [t.value for t in FlagType]),
            tag=pick("tag"),
            stale=pick("stale", ("true", "false")),
        )


class FlagRow(msgspec.Struct, frozen=True):
    id: int
    key: str
    name: str
    active: bool
    type: FlagType
    tags: list[str]
    rollout: str
    checks_per_day: float
    last_seen_ms: int | None
    stale: str | None
    daily: tuple[int, ...] = ()


def flag_rows(
    flags: Iterable[Mapping[str, Any]],
    usage: Mapping[str, FlagUsage],
    filters: ListFilters,
    now_ms: int,
) -> list[FlagRow]:
    """The rows of the flags list, filtered, in key order. Deleted flags are not listed."""
    needle = filters.search.lower()
    rows = []
    for flag in flags:
        if flag.get("deleted"):
            continue
        key = str(flag.get("key", ""))
        name = str(flag.get("name") or "")
        tags = [str(t) for t in flag.get("tags") or []]
        if needle and needle not in key.lower() and needle not in name.lower():
            continue
        active = bool(flag.get("active"))
        if filters.active and active != (filters.active == "true"):
            continue
        kind = flag_type(flag)
        if filters.type and kind.value != filters.type:
            continue
        if filters.tag and filters.tag not in tags:
            continue
        used = usage.get(key, NO_USAGE)
        stale = stale_reason(flag, used, now_ms)
        if filters.stale and (stale is not None) != (filters.stale == "true"):
            continue
        rows.append(
            FlagRow(
                id=int(flag["id"]),
                key=key,
                name=name,
                active=active,
                type=kind,
                tags=tags,
                rollout=rollout_summary(flag),
                checks_per_day=used.checks_per_day,
                last_seen_ms=used.last_seen_ms,
                stale=stale,
                daily=used.daily,
            )
        )
    rows.sort(key=lambda r: r.key)
    return rows


def all_tags(flags: Iterable[Mapping[str, Any]]) -> list[str]:
    return sorted({str(t) for f in flags if not f.get("deleted") for t in f.get("tags") or []})


# the flag editor ---------------------------------------------------------------------------


def value_text(value: Any) -> str:
    """A filter value as the editor's text box shows it: lists one item per line."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(value_text(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


def payload_text(value: Any) -> str:
    """Payloads are stored as JSON text (or, from some imports, as JSON values)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


class FilterModel(msgspec.Struct, frozen=True):
    type: str
    key: str
    operator: str
    value: str
    group_type_index: int | None = None


class ConditionModel(msgspec.Struct, frozen=True):
    filters: list[FilterModel]
    rollout_percentage: str
    variant: str


class VariantModel(msgspec.Struct, frozen=True):
    key: str
    name: str
    rollout_percentage: str
    payload: str


class EditorModel(msgspec.Struct, frozen=True):
    id: int | None
    key: str
    name: str
    active: bool
    tags: str
    conditions: list[ConditionModel]
    variants: list[VariantModel]
    boolean_payload: str
    holdout_id: str
    holdout_exclusion: str
    aggregation_group_type_index: int | None
    evaluation_runtime: str
    evaluation_contexts: str
    ensure_experience_continuity: bool
    bucketing_identifier: str
    version: int | None


def _number_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def filter_model(prop: Mapping[str, Any]) -> FilterModel:
    kind = str(prop.get("type") or "person")
    default_operator = {"cohort": "in", "flag": "flag_evaluates_to"}.get(kind, "exact")
    index = prop.get("group_type_index")
    return FilterModel(
        type=kind,
        key=str(prop.get("key", "")),
        operator=str(prop.get("operator") or default_operator),
        value=value_text(prop.get("value")),
        group_type_index=index if isinstance(index, int) else None,
    )


_NEW_FLAG = FlagDefinition(key="", filters={"groups": [{"properties": []}]})
"""What the editor shows for a new flag: on for everyone."""


def editor_model(stored: FeatureFlag | None) -> EditorModel:
    """The editor's fields for the ``stored`` flag (None: a new flag)."""
    flag: FlagDefinition = _NEW_FLAG if stored is None else stored
    filters = flag.filters
    multivariate = filters.get("multivariate") or {}
    payloads = filters.get("payloads") or {}
    holdout = filters.get("holdout") or {}
    conditions = [
        ConditionModel(
            filters=[filter_model(p) for p in group.get("properties") or []],
            rollout_percentage=_number_text(group.get("rollout_percentage")),
            variant=str(group.get("variant") or ""),
        )
        for group in filters.get("groups") or []
    ]
    variants = [
        VariantModel(
            key=str(v.get("key", "")),
            name=str(v.get("name") or ""),
            rollout_percentage=_number_text(v.get("rollout_percentage")),
            payload=payload_text(payloads.get(str(v.get("key", "")))),
        )
        for v in multivariate.get("variants") or []
    ]
    index = filters.get("aggregation_group_type_index")
    return EditorModel(
        id=stored.id if stored is not None else None,
        key=flag.key,
        name=flag.name,
        active=flag.active,
        tags=", ".join(flag.tags),
        conditions=conditions,
        variants=variants,
        boolean_payload=payload_text(payloads.get("true")),
        holdout_id=_number_text(holdout.get("id")),
        holdout_exclusion=_number_text(holdout.get("exclusion_percentage")),
        aggregation_group_type_index=index if isinstance(index, int) else None,
        evaluation_runtime=flag.evaluation_runtime or "all",
        evaluation_contexts=", ".join(flag.evaluation_contexts),
        ensure_experience_continuity=flag.ensure_experience_continuity,
        bucketing_identifier=flag.bucketing_identifier or "distinct_id",
        version=stored.version if stored is not None else None,
    )


# a flag's history -------------------------------------------------------------------------


class HistoryEntry(msgspec.Struct, frozen=True):
    when_ms: int
    who: str
    activity: str
    lines: list[DiffLine]
    version: int | None  # the version this change produced, when known
    can_roll_back: bool  # an earlier version the flag can return to


def history_entries(
    activities: Iterable[StoredActivity], versions: Iterable[FlagVersion], current_version: int
) -> list[HistoryEntry]:
    """A flag's activity, newest first, each with its readable diff and the version it made."""
    version_of = {v.activity_id: v.version for v in versions if v.activity_id is not None}
    entries = []
    for stored in sorted(activities, key=lambda s: s.id, reverse=True):
        record = stored.record
        actor = record.actor
        who = actor.email or ("Flagstaff" if actor.is_system else "a personal API key")
        trigger = record.detail.trigger
        if trigger is not None and trigger.job_type == APPROVAL_JOB:
            approver = trigger.payload.get("approved_by_email") or "a personal API key"
            who += f", approved by {approver}"
        version = version_of.get(stored.id)
        entries.append(
            HistoryEntry(
                when_ms=record.created_at_ms,
                who=who,
                activity=record.activity.value.replace("_", " "),
                lines=readable_changes(record.detail.changes),
                version=version,
                can_roll_back=version is not None and version != current_version,
            )
        )
    return entries
