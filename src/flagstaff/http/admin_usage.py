"""Management routes for flag usage and property value suggestions, added to ``admin.ROUTES``.

- ``GET .../feature_flags/{id}/usage/``: the flag's checks per UTC day and value, from the
  rollup ingestion keeps (``store/flag_usage.py``).
- ``GET .../persons/values/?key=``: values of a person property, most frequent first, in
  PostHog's shape (``[{"name", "count"}]``), from a bounded sample of the project's newest
  persons (``store/property_values.py``); ``value`` keeps those containing it.
- ``GET .../groups/property_values/?group_type_index=&key=``: the same for a group type.

The use cases (``application/flag_usage.py``, ``application/property_values.py``) return
records: these handlers read the query, call them and render the records with the use
cases' ``*_json`` functions.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from flagstaff.application import flag_usage as usage
from flagstaff.application import property_values as values
from flagstaff.application.context import Caller
from flagstaff.http.admin_context import existing_flag
from flagstaff.http.rest import group_type_index_param, int_param
from flagstaff.store.base import Store


async def flag_usage(ctx: Caller[Store], request: Request) -> Any:
    flag = await existing_flag(ctx, request)
    days = int_param(request, "days", usage.WINDOW_DAYS)
    return usage.usage_json(await usage.flag_usage(ctx, flag, days))


async def _suggestions(ctx: Caller[Store], request: Request, index: int | None) -> Any:
    found = await values.suggestions(
        ctx,
        request.query_params.get("key") or "",
        index,
        request.query_params.get("value") or "",
        int_param(request, "limit", values.DEFAULT_SUGGESTIONS, values.MAX_SUGGESTIONS),
    )
    return [values.suggestion_json(v) for v in found]


async def person_values(ctx: Caller[Store], request: Request) -> Any:
    return await _suggestions(ctx, request, None)


async def group_values(ctx: Caller[Store], request: Request) -> Any:
    return await _suggestions(ctx, request, group_type_index_param(request))


ROUTES = [
    (
        "GET",
        "/feature_flags/{flag_id}/usage/",
        flag_usage,
        "A feature flag's checks per UTC day and value ($feature_flag_called events)",
    ),
    (
        "GET",
        "/persons/values/",
        person_values,
        "Values of a person property, most frequent first (a sample of the newest persons)",
    ),
    (
        "GET",
        "/groups/property_values/",
        group_values,
        "Values of a group property, most frequent first (a sample of the group type)",
    ),
]
"""Paths under ``/api/projects/{project_id}``."""
