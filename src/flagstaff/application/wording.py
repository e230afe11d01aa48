"""Request bodies decoded by their Struct (:func:`flagstaff.application.inputs.decode`) but
refused in the words the API has always used for some fields.

A refusal about one of ``wording``'s fields (the field itself or anything inside it) becomes
that field's ``(code, detail)``, with ``attr`` the field; the others keep ``decode``'s words.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import decode

__all__ = ["decode_worded"]

T = TypeVar("T", bound=msgspec.Struct)


def _field(attr: str | None) -> str:
    """The top-level field of a refusal's path (``distinct_ids[2]``: ``distinct_ids``)."""
    return (attr or "").split(".", 1)[0].split("[", 1)[0]


def decode_worded(kind: type[T], body: Any, wording: dict[str, tuple[str, str]]) -> T:
    """``body`` as ``kind``; a refusal about a field of ``wording`` in that field's words."""
    try:
        return decode(kind, body)
    except ApiError as exc:
        field = _field(exc.attr)
        if field in wording:
            code, detail = wording[field]
            raise ApiError(400, code, detail, field) from None
        raise
