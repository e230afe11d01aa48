"""What every management handler receives (:class:`Caller`) and the small helpers the
handler modules share; :mod:`flagstaff.http.admin` builds the route table from those modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request

from flagstaff.application import flags
from flagstaff.application.accounts import project_json
from flagstaff.application.context import Caller
from flagstaff.flags.records import FeatureFlag
from flagstaff.http.rest import path_int
from flagstaff.store.base import Store

__all__ = ["Caller", "Handler", "existing_flag", "project_json"]

Handler = Callable[[Caller[Store], Request], Awaitable[Any]]


async def existing_flag(ctx: Caller[Store], request: Request) -> FeatureFlag:
    """The flag named by the path's ``flag_id``; 404 when the project has none."""
    return await flags.existing_flag(ctx, path_int(request, "flag_id"))
