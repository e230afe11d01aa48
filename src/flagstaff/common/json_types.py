"""Checks of decoded JSON values, written once: JSON's ``true`` decodes to a Python ``bool``,
which is also an ``int``, so a number check must leave booleans out."""

from __future__ import annotations

from typing import Any, TypeGuard

__all__ = ["is_int", "is_number"]


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer (not ``true``/``false``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[int | float]:
    """A JSON number, integer or not (not ``true``/``false``)."""
    return isinstance(value, int | float) and not isinstance(value, bool)
