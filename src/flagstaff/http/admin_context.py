"""What every management handler receives (:class:`AdminContext`) and the small helpers the
handler modules share; :mod:`flagstaff.http.admin` builds the route table from those modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.requests import Request

from flagstaff.accounts.roles import Principal
from flagstaff.accounts.store import AccountStore
from flagstaff.activity.records import Actor, ChangeSource
from flagstaff.application.errors import ApiError
from flagstaff.http.rest import path_int
from flagstaff.store.base import Store

Handler = Callable[["AdminContext", Request], Awaitable[Any]]


class AdminContext(msgspec.Struct):
    store: Store
    accounts: AccountStore
    project_id: int
    principal: Principal

    @property
    def source(self) -> ChangeSource:
        """The principal as the author of a change, for the activity log."""
        return ChangeSource(actor=Actor(user_id=self.principal.user_id, email=self.principal.email))


def project_json(project: Any) -> dict[str, Any]:
    return {
        "id": project.id,
        "uuid": project.uuid,
        "name": project.name,
        "api_token": project.api_token,
        "created_at": project.created_at,
    }


async def existing_flag(ctx: AdminContext, request: Request) -> dict[str, Any]:
    """The flag named by the path's ``flag_id``; 404 when the project has none."""
    flag = await ctx.store.get_flag(ctx.project_id, path_int(request, "flag_id"))
    if flag is None:
        raise ApiError(404, "not_found", "no such feature flag")
    return flag
