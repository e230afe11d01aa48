"""Request bodies decoded once: each use case's input is a msgspec Struct, and :func:`decode`
turns a decoded JSON body into it or refuses it with a 400 naming the field.

The same Structs are the request bodies of the OpenAPI document (``http/openapi.py``), so the
documented shape and the checked shape cannot drift. Fields a PATCH may leave out are typed
``X | UnsetType = UNSET`` (``X | UnsetType | None`` where null means something): :func:`given`
tells "left out" from "set to null". Unknown fields
are ignored (a PostHog export carries many read-only ones).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from flagstaff.application.errors import ApiError
from flagstaff.common.invalid import conversion_problem

__all__ = ["UNSET", "UnsetType", "decode", "given", "require_object"]

T = TypeVar("T", bound=msgspec.Struct)

_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]+)`, got `(?P<got>[^`]+)`$")
_WORDS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "array": "a list",
    "object": "an object",
    "null": "null",
}


def require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_input", "the request body must be a JSON object")
    return body


def decode(kind: type[T], body: Any) -> T:
    """``body`` (decoded JSON) as ``kind``, or an :class:`ApiError` 400: ``required`` for a
    missing field, ``invalid_input`` for a wrong type or value, ``attr`` the field's path."""
    require_object(body)
    try:
        return msgspec.convert(body, kind)
    except msgspec.ValidationError as exc:
        raise refusal(exc) from None


def refusal(exc: msgspec.ValidationError) -> ApiError:
    """msgspec's message in the API's words: ``name must be a string`` with ``attr`` ``name``."""
    problem = conversion_problem(exc)
    path, message = problem.path, problem.message
    if problem.missing:
        return ApiError(400, "required", f"{path} is required", path)
    expected = _EXPECTED.match(message)
    if expected is not None:
        wants = [_WORDS.get(w, f"`{w}`") for w in expected["want"].split(" | ")]
        detail = "must be " + " or ".join(wants)
        return ApiError(400, "invalid_input", f"{path} {detail}" if path else detail, path or None)
    message = message[0].lower() + message[1:] if message else "is not valid"
    return ApiError(400, "invalid_input", f"{path}: {message}" if path else message, path or None)


def given(struct: msgspec.Struct) -> dict[str, Any]:
    """The fields of ``struct`` the body set (not UNSET), by attribute name."""
    return {
        name: value
        for name in struct.__struct_fields__
        if (value := getattr(struct, name)) is not UNSET
    }
