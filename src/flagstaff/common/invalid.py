"""A rejected definition (flag, survey, early access feature, experiment): every problem found,
each named by the path of the field it is about. Pure; the HTTP layer turns it into a 400."""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec

Errors = list[tuple[str, str]]
"""``(field path, message)`` pairs; the path is ``""`` for a problem of the whole body."""


class DefinitionInvalid(ValueError):
    """A definition that cannot be saved."""

    def __init__(self, errors: Errors) -> None:
        self.errors = errors
        super().__init__(self.detail)

    @property
    def detail(self) -> str:
        return "; ".join(f"{path}: {message}" if path else message for path, message in self.errors)

    @property
    def attr(self) -> str | None:
        """The first problem's field path (PostHog's ``attr``), if it names one."""
        return self.errors[0][0] if self.errors and self.errors[0][0] else None


_AT = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`$")


@dataclass(frozen=True)
class ConversionProblem:
    """Why msgspec refused to convert a body, read from its message."""

    path: str
    """The field's path (``filters.groups[0]``; ``""``: the body), a missing field's included."""
    message: str
    """msgspec's words without the path (``Expected `str`, got `int```)."""
    missing: bool
    """A required field was left out."""


def conversion_problem(error: msgspec.ValidationError) -> ConversionProblem:
    """A refused conversion as the field it is about and msgspec's words; each API words it
    its own way."""
    message = str(error)
    path = ""
    at = _AT.search(message)
    if at is not None:
        path = at["path"].lstrip(".")
        message = message[: at.start()]
    missing = _MISSING.match(message)
    if missing is not None:
        path = f"{path}.{missing['name']}" if path else missing["name"]
    return ConversionProblem(path, message, missing is not None)
