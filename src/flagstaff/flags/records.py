"""A feature flag as it is stored and written: PostHog's fields, typed. The engine itself
reads flags as PostHog's JSON (the definitions /flags compiles); these records are what the
management side (the API, the console, the CLI, the products that own flags) passes around."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["FeatureFlag", "FlagDefinition", "flag_json"]


class FlagDefinition(msgspec.Struct, frozen=True, kw_only=True):
    """A feature flag's writable fields, as PostHog names them, once validated
    (``application/flags.flag_from`` makes every one that is written)."""

    key: str
    name: str = ""
    filters: dict[str, Any] = {}
    """PostHog's structure: condition sets (``groups``), ``multivariate``, ``payloads``,
    ``super_groups``, ``holdout``, ``aggregation_group_type_index``."""
    active: bool = True
    deleted: bool = False
    ensure_experience_continuity: bool = False
    evaluation_runtime: str | None = "all"
    evaluation_contexts: list[str] = []
    bucketing_identifier: str | None = "distinct_id"
    tags: list[str] = []


class FeatureFlag(FlagDefinition, frozen=True, kw_only=True):
    """A stored feature flag: the management API's answer, the console's and the CLI's."""

    id: int
    version: int
    """Incremented by every write; a write based on an older version is refused."""
    created_at: str
    updated_at: str


def flag_json(flag: FlagDefinition) -> dict[str, Any]:
    """A flag as JSON: the API's answer, the activity log's and the history's body."""
    body: dict[str, Any] = msgspec.to_builtins(flag)
    return body
