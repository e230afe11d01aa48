"""Request and answer helpers shared by the management API's handler modules."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import msgspec
from starlette.requests import Request

from flagstaff.application.errors import ApiError
from flagstaff.common.limits import MAX_GROUP_TYPES

MAX_BODY_BYTES = 2 * 1024 * 1024
"""Management bodies (a flag, a cohort, a list of distinct ids) are far smaller than this."""
MAX_ID = 2**63 - 1


async def json_body(request: Request) -> Any:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(
                413, "payload_too_large", f"the request body is larger than {MAX_BODY_BYTES} bytes"
            )
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        return {}
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        raise ApiError(400, "parse_error", "the body is not valid JSON") from None


def path_int(request: Request, name: str) -> int:
    """A positive integer id from the path; 404 ``no such <name>`` otherwise."""
    raw = request.path_params.get(name, "")
    if not raw.isdigit() or not 0 < int(raw) <= MAX_ID:
        raise ApiError(404, "not_found", f"no such {name.replace('_', ' ')}")
    return int(raw)


def int_param(request: Request, name: str, default: int, maximum: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "invalid_input", f"{name} must be an integer", name) from None
    if not 0 <= value <= MAX_ID:
        raise ApiError(400, "invalid_input", f"{name} must be between 0 and {MAX_ID}", name)
    return min(value, maximum) if maximum is not None else value


def group_type_index_param(request: Request) -> int:
    """The query's ``group_type_index``: one of the project's group type slots."""
    raw = request.query_params.get("group_type_index")
    if raw is None or not raw.isdigit() or int(raw) >= MAX_GROUP_TYPES:
        raise ApiError(
            400,
            "invalid_input",
            f"group_type_index must be 0-{MAX_GROUP_TYPES - 1}",
            "group_type_index",
        )
    return int(raw)


def paginated(request: Request, count: int, results: list[Any], limit: int, offset: int) -> Any:
    def link(new_offset: int) -> str:
        query = dict(request.query_params)
        query.update(limit=str(limit), offset=str(new_offset))
        return f"{request.url.replace(query=urlencode(query))}"

    return {
        "count": count,
        "next": link(offset + limit) if offset + limit < count else None,
        "previous": link(max(offset - limit, 0)) if offset > 0 else None,
        "results": results,
    }
