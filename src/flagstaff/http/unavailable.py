"""The one mapping of storage failures to HTTP: 503, ``Retry-After``, a JSON body.

Every route goes through :func:`store_unavailable`: the hot public routes (``app._answer``),
the management API and console (``admin.build_admin``'s handler of unexpected errors) and the
ASGI bridge under RSGI. ``/flags`` is the exception by design: a store that fails while its
context is read gives flags computed without it and ``errorsWhileComputingFlags``.
"""

from __future__ import annotations

from flagstaff.application.errors import ApiError
from flagstaff.http.limits import RETRY_AFTER_SECONDS
from flagstaff.server.outage import OUTAGE
from flagstaff.store.faults import is_unavailable

__all__ = ["RETRY_AFTER", "store_unavailable"]

RETRY_AFTER = str(RETRY_AFTER_SECONDS)


def store_unavailable(exc: BaseException, where: str) -> ApiError | None:
    """The 503 to answer when ``exc`` means storage cannot serve now (logged once per
    outage), else None (the caller answers its 500)."""
    if not is_unavailable(exc):
        return None
    OUTAGE.failed(exc, where)
    return ApiError(
        503,
        "store_unavailable",
        "the database cannot be reached or written right now; nothing was changed: retry",
    )
