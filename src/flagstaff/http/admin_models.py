"""Shaping and checking management API bodies: flags and cohorts as PostHog writes them."""

from __future__ import annotations

import re
from typing import Any

from flagstaff.activity.rollback import FLAG_WRITABLE_FIELDS
from flagstaff.common.invalid import DefinitionInvalid
from flagstaff.flags import validate_flag
from flagstaff.flags.validation import BUCKETING_IDENTIFIERS, RUNTIMES
from flagstaff.http.errors import ApiError, invalid_input
from flagstaff.ingest.groups import MAX_GROUP_TYPES

_FLAG_DEFAULTS: dict[str, Any] = {
    "name": "",
    "active": True,
    "deleted": False,
    "ensure_experience_continuity": False,
    "evaluation_runtime": "all",
    "evaluation_contexts": [],
    "bucketing_identifier": "distinct_id",
    "tags": [],
}
_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,400}$")


def _require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_input", "the request body must be a JSON object")
    return body


def flag_from_input(body: Any, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """The full flag a create (``current`` None) or PATCH body asks for, validated.

    Unknown and read-only fields (id, created_at, team_id... as found in a PostHog export) are
    ignored. ``evaluation_tags`` is accepted for ``evaluation_contexts``; a legacy top-level
    ``rollout_percentage`` without ``filters`` becomes one condition set.
    """
    body = _require_object(body)
    base = dict(_FLAG_DEFAULTS) if current is None else dict(current)
    changes = {k: body[k] for k in FLAG_WRITABLE_FIELDS if k in body}
    if "evaluation_contexts" not in changes and "evaluation_tags" in body:
        changes["evaluation_contexts"] = body["evaluation_tags"]
    if "filters" not in changes and "rollout_percentage" in body and current is None:
        changes["filters"] = {
            "groups": [{"properties": [], "rollout_percentage": body["rollout_percentage"]}]
        }
    flag = {**base, **changes}
    if current is None:
        flag.setdefault("filters", {"groups": []})
        if "key" not in flag:
            raise ApiError(400, "required", "key is required", "key")
    if flag.get("evaluation_contexts") is None:
        flag["evaluation_contexts"] = []
    if flag.get("name") is None:
        flag["name"] = ""
    errors = _flag_field_errors(flag)
    if not errors:
        errors = validate_flag(flag)
    if errors:
        raise invalid_input(DefinitionInvalid(errors))
    if current is not None:
        flag["version"] = current.get("version")
    return flag


def _flag_field_errors(flag: dict[str, Any]) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    key = flag.get("key")
    if not isinstance(key, str) or not _KEY.match(key):
        errors.append(("key", "must be 1-400 letters, digits, '_', '-' or '.'"))
    if not isinstance(flag.get("name"), str):
        errors.append(("name", "must be a string"))
    for name in ("active", "deleted", "ensure_experience_continuity"):
        if not isinstance(flag.get(name), bool):
            errors.append((name, "must be true or false"))
    runtime = flag.get("evaluation_runtime")
    if runtime is not None and runtime not in RUNTIMES:
        errors.append(("evaluation_runtime", "must be one of all, client, server"))
    contexts = flag.get("evaluation_contexts")
    if not isinstance(contexts, list) or not all(isinstance(c, str) for c in contexts):
        errors.append(("evaluation_contexts", "must be a list of strings"))
    bucketing = flag.get("bucketing_identifier")
    if bucketing is not None and bucketing not in BUCKETING_IDENTIFIERS:
        errors.append(("bucketing_identifier", "must be distinct_id or device_id"))
    if not isinstance(flag.get("filters"), dict):
        errors.append(("filters", "must be an object"))
    return errors


def cohort_from_input(body: Any, current: dict[str, Any] | None = None) -> dict[str, Any]:
    body = _require_object(body)
    base: dict[str, Any] = (
        {"name": "", "description": "", "is_static": False, "deleted": False, "filters": None}
        if current is None
        else dict(current)
    )
    for name in ("name", "description", "filters", "deleted"):
        if name in body:
            base[name] = body[name]
    if current is None:
        base["is_static"] = bool(body.get("is_static", False))
        ids = body.get("distinct_ids", [])
        if not isinstance(ids, list) or not all(isinstance(d, str | int) for d in ids):
            raise ApiError(400, "invalid_input", "must be a list of distinct ids", "distinct_ids")
        base["distinct_ids"] = [str(d) for d in ids]
    if not isinstance(base.get("name"), str):
        raise ApiError(400, "invalid_input", "must be a string", "name")
    if base["is_static"]:
        base["filters"] = None
    else:
        filters = base.get("filters")
        if not isinstance(filters, dict) or "properties" not in filters:
            raise ApiError(
                400,
                "invalid_input",
                "a dynamic cohort needs filters.properties, a property group",
                "filters",
            )
        problem = _property_group_problem(filters["properties"], "filters.properties")
        if problem is not None:
            raise ApiError(400, "invalid_input", problem[1], problem[0])
    if current is not None:
        base["version"] = current.get("version")
    return base


def _property_group_problem(group: Any, path: str) -> tuple[str, str] | None:
    if not isinstance(group, dict):
        return path, "must be a property group object"
    if group.get("type") not in ("AND", "OR"):
        return f"{path}.type", "must be AND or OR"
    values = group.get("values")
    if not isinstance(values, list):
        return f"{path}.values", "must be a list"
    for i, value in enumerate(values):
        where = f"{path}.values[{i}]"
        if not isinstance(value, dict):
            return where, "must be an object"
        if "values" in value:
            problem = _property_group_problem(value, where)
            if problem is not None:
                return problem
            continue
        # A leaf property filter: let the flag validator judge it inside a one-condition flag.
        probe = {
            "key": "cohort-check",
            "filters": {"groups": [{"properties": [value], "rollout_percentage": 100}]},
        }
        errors = validate_flag(probe)
        if errors:
            return where, errors[0][1]
    return None


def distinct_ids_from(body: Any) -> list[str]:
    body = _require_object(body)
    ids = body.get("distinct_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(d, str | int) for d in ids):
        raise ApiError(
            400, "invalid_input", "distinct_ids must be a non-empty list", "distinct_ids"
        )
    return [str(d) for d in ids]


_GROUP_TYPE = re.compile(r"^[^\x00-\x1f]{1,400}$")


def group_type_from_input(body: Any) -> tuple[str, int | None]:
    """(name, index or None) of a group type create body: ``group_type``, ``group_type_index``."""
    body = _require_object(body)
    name = body.get("group_type")
    if not isinstance(name, str) or not _GROUP_TYPE.match(name):
        raise ApiError(
            400, "invalid_input", "group_type must be 1-400 printable characters", "group_type"
        )
    index = body.get("group_type_index")
    if index is not None and (
        not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < MAX_GROUP_TYPES
    ):
        raise ApiError(
            400,
            "invalid_input",
            f"group_type_index must be an integer 0-{MAX_GROUP_TYPES - 1}",
            "group_type_index",
        )
    return name, index
