"""A rejected definition (flag, survey, early access feature, experiment): every problem found,
each named by the path of the field it is about. Pure; the HTTP layer turns it into a 400."""

from __future__ import annotations

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
