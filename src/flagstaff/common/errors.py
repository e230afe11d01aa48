"""The errors of the stores (and the protocols they implement, such as the accounts'), which
the layers above turn into answers: a :class:`Conflict` names the field it is about."""

from __future__ import annotations


class StoreError(Exception):
    """A storage operation failed in a way the caller can report."""


class Conflict(StoreError):
    """A uniqueness rule would be broken (for example a duplicate active flag key)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    # The conflicts every engine reports, worded once.

    @classmethod
    def project_token_taken(cls) -> Conflict:
        return cls("api_token", "a project with this token already exists")

    @classmethod
    def personal_key_taken(cls) -> Conflict:
        return cls("value", "this personal API key already exists")

    @classmethod
    def flag_key_taken(cls, key: str) -> Conflict:
        return cls("key", f"a feature flag with key {key!r} already exists")

    @classmethod
    def flag_version_stale(cls) -> Conflict:
        return cls("version", "the flag changed meanwhile; read it again and retry")

    @classmethod
    def holdout_in_use(cls, experiments: int) -> Conflict:
        return cls("holdout", f"the holdout is used by {experiments} experiment(s)")

    @classmethod
    def cohort_not_static(cls) -> Conflict:
        return cls("is_static", "only static cohorts have members to add or remove")

    @classmethod
    def last_admin(cls) -> Conflict:
        return cls("role", "a project needs an admin: make another member admin first")


class NotFound(StoreError):
    """The record does not exist in this project."""
