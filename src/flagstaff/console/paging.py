"""Pages of a long list: which rows a page shows and the links to the others. No I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar
from urllib.parse import urlencode

import msgspec

T = TypeVar("T")

PAGE_SIZE = 100
"""Rows per page of the flags list (PostHog's list shows 100 too)."""


class Page(msgspec.Struct, Generic[T], frozen=True):
    rows: list[T]
    number: int
    """From 1."""
    pages: int
    previous: str | None
    """The previous page's query string (``?...``), None on the first."""
    next: str | None


def page_number(query: Mapping[str, str]) -> int:
    raw = (query.get("page") or "").strip()
    return int(raw) if raw.isdigit() and 0 < int(raw) < 1_000_000 else 1


def page_of(rows: Sequence[T], query: Mapping[str, str], size: int = PAGE_SIZE) -> Page[T]:
    """The page of ``rows`` the query asks for (past the last: the last), with links that keep
    the query's other parameters (its filters)."""
    pages = max(1, -(-len(rows) // size))
    number = min(page_number(query), pages)

    def link(n: int) -> str:
        kept = {k: v for k, v in query.items() if k != "page"}
        if n > 1:
            kept["page"] = str(n)
        return "?" + urlencode(kept)

    return Page(
        rows=list(rows[(number - 1) * size : number * size]),
        number=number,
        pages=pages,
        previous=link(number - 1) if number > 1 else None,
        next=link(number + 1) if number < pages else None,
    )
