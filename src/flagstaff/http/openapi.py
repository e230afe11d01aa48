"""The OpenAPI 3.1 document of the management API, built from its route table."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from flagstaff import __version__

_QUERY: dict[str, list[tuple[str, str, str]]] = {
    "list_flags": [("limit", "integer", "page size"), ("offset", "integer", "rows to skip")],
    "list_cohorts": [("limit", "integer", "page size"), ("offset", "integer", "rows to skip")],
    "list_warnings": [("limit", "integer", "page size"), ("offset", "integer", "rows to skip")],
    "find_person": [("distinct_id", "string", "a distinct id of the person")],
    "find_group": [
        ("group_type_index", "integer", "group type index, 0-4"),
        ("group_key", "string", "the group's key"),
    ],
    "list_events": [
        ("distinct_id", "string", "only this distinct id's events"),
        ("event", "string", "only events with this name"),
        ("after", "string", "ISO 8601: only events after this time"),
        ("before", "string", "ISO 8601: only events before this time"),
        ("limit", "integer", "page size, at most 1000"),
        ("cursor", "string", "opaque cursor from the previous page's next link"),
    ],
}

_FLAG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "key": {"type": "string"},
        "name": {"type": "string"},
        "active": {"type": "boolean"},
        "filters": {"type": "object"},
        "ensure_experience_continuity": {"type": "boolean"},
        "evaluation_runtime": {"enum": ["all", "client", "server"]},
        "evaluation_contexts": {"type": "array", "items": {"type": "string"}},
        "bucketing_identifier": {"enum": ["distinct_id", "device_id"]},
    },
}
_COHORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "is_static": {"type": "boolean"},
        "filters": {"type": "object"},
        "distinct_ids": {"type": "array", "items": {"type": "string"}},
    },
}
_BODIES = {
    "create_flag": _FLAG_SCHEMA,
    "update_flag": _FLAG_SCHEMA,
    "create_cohort": _COHORT_SCHEMA,
    "update_cohort": _COHORT_SCHEMA,
    "add_cohort_members": {
        "type": "object",
        "properties": {"distinct_ids": {"type": "array", "items": {"type": "string"}}},
    },
    "remove_cohort_members": {
        "type": "object",
        "properties": {"distinct_ids": {"type": "array", "items": {"type": "string"}}},
    },
    "create_project": {"type": "object", "properties": {"name": {"type": "string"}}},
}
_ERROR = {
    "description": "error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def openapi_document(routes: Sequence[tuple[str, str, Any, str]]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for method, path, handler, summary in routes:
        name = handler.__name__
        params: list[dict[str, Any]] = [
            {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
            for p in re.findall(r"{(\w+)}", path)
        ]
        params += [
            {"name": q, "in": "query", "required": False, "schema": {"type": t}, "description": d}
            for q, t, d in _QUERY.get(name, [])
        ]
        op: dict[str, Any] = {
            "operationId": name,
            "summary": summary,
            "parameters": params,
            "responses": {
                ("204" if method == "DELETE" else "201" if name.startswith("create") else "200"): {
                    "description": "success"
                },
                "400": _ERROR,
                "401": _ERROR,
                "404": _ERROR,
            },
        }
        if name in _BODIES:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": _BODIES[name]}},
            }
        paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Flagstaff management API", "version": __version__},
        "security": [{"PersonalAPIKey": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"PersonalAPIKey": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string"},
                        "code": {"type": "string"},
                        "detail": {"type": "string"},
                        "attr": {"type": ["string", "null"]},
                    },
                    "required": ["type", "code", "detail"],
                }
            },
        },
    }
