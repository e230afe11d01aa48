"""Public product lists posthog-js reads with the project token in the query string.

``/api/web_experiments/?token=`` and ``/api/product_tours/?token=`` answer their empty shapes
(``{"experiments": []}``, ``{"product_tours": []}``, as posthog-js 1.449 reads them) until
those products exist, so posthog-js never logs a 404 for them.
"""

from __future__ import annotations

import msgspec

from flagstaff.application.errors import ApiError
from flagstaff.http.asgi import Request, Response
from flagstaff.http.flags import project_for_token
from flagstaff.server.services import Services
from flagstaff.store.base import Project

_EMPTY_WEB_EXPERIMENTS = msgspec.json.encode({"experiments": []})
_EMPTY_PRODUCT_TOURS = msgspec.json.encode({"product_tours": []})


async def project_from_query(svc: Services, request: Request) -> Project:
    """The project of ``?token=`` (or ``api_key``), or 401 as PostHog answers."""
    token = request.query.get("token") or request.query.get("api_key")
    if not token:
        raise ApiError(
            401, "missing_api_key", "send the project token as ?token= in the query string"
        )
    return await project_for_token(svc, token)


async def web_experiments_endpoint(svc: Services, request: Request) -> Response:
    await project_from_query(svc, request)
    return Response(_EMPTY_WEB_EXPERIMENTS)


async def product_tours_endpoint(svc: Services, request: Request) -> Response:
    await project_from_query(svc, request)
    return Response(_EMPTY_PRODUCT_TOURS)
