"""A readable diff for the console: nested changes as one line per leaf, in words.

``changes_between`` answers at the level of top-level fields (``filters`` changed); people want
to read "Condition set 1: rollout 50% -> 100%". This walks both values and reports each leaf.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from flagstaff.activity.records import Change

_MISSING: Any = object()

FIELD_LABELS: dict[str, str] = {
    "key": "Key",
    "name": "Description",
    "active": "Enabled",
    "deleted": "Deleted",
    "filters": "Release conditions",
    "groups": "Condition sets",
    "properties": "Properties",
    "rollout_percentage": "Rollout %",
    "variant": "Variant override",
    "multivariate": "Variants",
    "variants": "Variants",
    "payloads": "Payloads",
    "holdout": "Holdout",
    "exclusion_percentage": "Exclusion %",
    "aggregation_group_type_index": "Match by group type",
    "super_groups": "Early access conditions",
    "ensure_experience_continuity": "Experience continuity",
    "evaluation_runtime": "Runtime",
    "evaluation_contexts": "Evaluation contexts",
    "bucketing_identifier": "Bucket by",
    "tags": "Tags",
    "operator": "operator",
    "value": "value",
    "type": "type",
}


class LineKind(enum.StrEnum):
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


class DiffLine(msgspec.Struct, frozen=True):
    path: str  # machine path: filters.groups[0].rollout_percentage
    label: str  # for people: Release conditions > Condition sets 1 > Rollout %
    kind: LineKind
    before: str  # compact JSON, "" when added
    after: str  # compact JSON, "" when removed


def show(value: Any) -> str:
    if value is _MISSING:
        return ""
    return msgspec.json.encode(value).decode()


def _label(parts: list[str | int]) -> str:
    words = []
    for part in parts:
        if isinstance(part, int):
            words.append(f"#{part + 1}")
        else:
            words.append(FIELD_LABELS.get(part, part))
    return " > ".join(words)


def _path(parts: list[str | int]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _walk(before: Any, after: Any, parts: list[str | int], out: list[DiffLine]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(before.keys() | after.keys(), key=str):
            _walk(before.get(key, _MISSING), after.get(key, _MISSING), [*parts, key], out)
        return
    if isinstance(before, list) and isinstance(after, list) and parts and parts[-1] != "tags":
        for i in range(max(len(before), len(after))):
            old = before[i] if i < len(before) else _MISSING
            new = after[i] if i < len(after) else _MISSING
            _walk(old, new, [*parts, i], out)
        return
    if before is _MISSING and after is _MISSING:
        return
    if before is not _MISSING and after is not _MISSING:
        if before == after and type(before) is type(after):
            return
        kind = LineKind.CHANGED
    else:
        kind = LineKind.ADDED if before is _MISSING else LineKind.REMOVED
    out.append(DiffLine(_path(parts), _label(parts), kind, show(before), show(after)))


def readable_diff(before: Any, after: Any) -> list[DiffLine]:
    """Every leaf that differs between two JSON values (lists compared by position; tags as
    one value)."""
    out: list[DiffLine] = []
    _walk(before, after, [], out)
    return out


def readable_changes(changes: list[Change] | None) -> list[DiffLine]:
    """The readable lines of an activity record's ``detail.changes``."""
    out: list[DiffLine] = []
    for change in changes or []:
        field = change.field or ""
        old = _MISSING if change.action == "created" else change.before
        new = _MISSING if change.action == "deleted" else change.after
        _walk(old, new, [field] if field else [], out)
    return out
