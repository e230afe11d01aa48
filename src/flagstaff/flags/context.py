"""Per-request evaluation state shared by the compiled matchers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flagstaff.flags.model import EvalRequest

MISSING: Any = object()


class EvaluationError(Exception):
    """A flag cannot be evaluated for this request (e.g. a missing or cyclic cohort)."""


class Context:
    __slots__ = (
        "cohort_results",
        "device_id",
        "distinct_id",
        "distinct_id_bytes",
        "failed",
        "group_properties",
        "groups",
        "overrides",
        "person",
        "static_cohort_ids",
        "values",
    )

    def __init__(self, request: EvalRequest) -> None:
        self.distinct_id = request.distinct_id
        self.distinct_id_bytes = request.distinct_id.encode("utf-8", "surrogatepass")
        self.person = request.person_properties
        self.groups = request.groups
        self.group_properties = request.group_properties
        self.device_id = request.device_id
        self.overrides = request.hash_key_overrides
        self.static_cohort_ids = request.static_cohort_ids
        self.values: dict[int, Any] = {}
        self.cohort_results: dict[int, bool] = {}
        self.failed = False
        """Whether some flag's result is a failure (``failed=True``)."""

    def group_key(self, group_name: str | None) -> str | None:
        """The request's key for a group type, when it is a usable identifier."""
        if group_name is None:
            return None
        key: object = self.groups.get(group_name)
        if isinstance(key, str):
            return key or None
        if isinstance(key, int | float) and not isinstance(key, bool):
            return str(key)
        return None


Matcher = Callable[[Context], bool]
