"""One error for every refused use case, in PostHog's JSON shape: ``{type, code, detail, attr}``.

The adapters render it: the HTTP API as that JSON with ``status``, the console as a page or a
form message, the CLI as a line on stderr."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from flagstaff.common.invalid import DefinitionInvalid

T = TypeVar("T")

_TYPES = {
    400: "validation_error",
    401: "authentication_error",
    402: "quota_limited",
    403: "authentication_error",
    404: "invalid_request",
    405: "invalid_request",
    409: "validation_error",
    413: "validation_error",
    414: "invalid_request",
    429: "throttled_error",
}


class ApiError(Exception):
    """An error answered to the client as JSON with ``status``."""

    def __init__(self, status: int, code: str, detail: str, attr: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.attr = attr

    def body(self) -> bytes:
        return error_body(self.status, self.code, self.detail, self.attr)


def error_body(status: int, code: str, detail: str, attr: str | None = None) -> bytes:
    return msgspec.json.encode(
        {
            "type": _TYPES.get(status, "server_error"),
            "code": code,
            "detail": detail,
            "attr": attr,
        }
    )


def invalid_input(error: DefinitionInvalid) -> ApiError:
    """A rejected definition as a 400 naming every problem, ``attr`` the first field."""
    return ApiError(400, "invalid_input", error.detail, error.attr)


def existing(found: T | None, what: str) -> T:
    """``found``, or the 404 ``no such {what}`` when it is None (a record the project has not)."""
    if found is None:
        raise ApiError(404, "not_found", f"no such {what}")
    return found
