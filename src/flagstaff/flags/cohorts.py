"""Cohort membership compiled into matchers over the person's properties.

Dynamic cohorts are property groups (``{"type": "AND"|"OR", "values": [...]}``, nested, the
legacy group type ``"property"`` meaning AND); entries are person property filters or
cohort references, each with an optional ``negation``. Static cohorts are decided by the
request's ``static_cohort_ids``. A reference to an unknown cohort, or a reference cycle,
makes the flag fail when evaluation reaches it, like the PostHog server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flagstaff.flags.context import Context, EvaluationError, Matcher
from flagstaff.flags.filters import CallCheck, property_check
from flagstaff.flags.flag_codegen import (
    MAX_ENTRIES,
    MAX_NESTING,
    CohortSource,
    Combination,
    GeneratedSources,
    Negation,
    Node,
)


def _always_false(_ctx: Context) -> bool:
    return False


def _fail(message: str) -> Matcher:
    def fail(_ctx: Context) -> bool:
        raise EvaluationError(message)

    return fail


def cohort_id_of(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _is_group(entry: dict[str, Any]) -> bool:
    return isinstance(entry.get("values"), list) or entry.get("type") in ("AND", "OR")


class CohortCompiler:
    """Compiles cohorts on demand, once each, sharing results across flags."""

    def __init__(self, cohorts: Mapping[str, dict[str, Any]], sources: GeneratedSources) -> None:
        self._sources = sources
        self._definitions: dict[int, dict[str, Any]] = {}
        for raw_id, definition in cohorts.items():
            cohort_id = cohort_id_of(raw_id)
            if cohort_id is None and isinstance(definition, dict):
                cohort_id = cohort_id_of(definition.get("id"))
            if cohort_id is not None and isinstance(definition, dict):
                self._definitions[cohort_id] = definition
        self._membership: dict[int, Matcher] = {}
        self._in_progress: set[int] = set()
        self.static_ids: set[int] = set()
        self.uses_static = False

    def membership(self, cohort_id: int | None) -> Matcher:
        """Matcher telling whether the person belongs to a cohort."""
        if cohort_id is None or cohort_id not in self._definitions:
            return _fail(f"cohort {cohort_id} not found")
        cached = self._membership.get(cohort_id)
        if cached is not None:
            return cached
        if cohort_id in self._in_progress:
            return _fail(f"cohort {cohort_id} references itself")
        definition = self._definitions[cohort_id]
        if definition.get("is_static"):
            self.uses_static = True
            static_id = cohort_id

            def static_member(ctx: Context) -> bool:
                return static_id in ctx.static_cohort_ids

            self._membership[cohort_id] = static_member
            return static_member
        self._in_progress.add(cohort_id)
        try:
            group = _properties_of(definition)
            tree: Node = self._group(group) if group else False
        finally:
            self._in_progress.discard(cohort_id)
        if _depth(tree) <= MAX_NESTING and _size(tree) <= MAX_ENTRIES:
            member = CohortSource(cohort_id, tree).function(self._sources, f"cohort:{cohort_id}")
        else:
            member = _cached_member(cohort_id, _matcher(tree))
        self._membership[cohort_id] = member
        return member

    def reference(self, prop: dict[str, Any]) -> Matcher:
        """Matcher for a ``type: cohort`` filter: operator in (default) or not_in."""
        operator = prop.get("operator") or "in"
        member = self.membership(cohort_id_of(prop.get("value")))
        if operator in ("in", "exact"):
            return member
        if operator == "not_in":
            return lambda ctx: not member(ctx)
        return _always_false

    def _group(self, group: dict[str, Any]) -> Node:
        kind = group.get("type", "AND")
        values = group.get("values")
        if kind not in ("AND", "OR", "property") or not isinstance(values, list):
            return False
        parts = tuple(self._entry(entry) for entry in values if isinstance(entry, dict))
        return Combination(kind == "OR", parts)

    def _entry(self, entry: dict[str, Any]) -> Node:
        if _is_group(entry):
            return self._group(entry)
        node: Node
        if entry.get("type") == "cohort":
            node = CallCheck(self.reference(entry))
        elif entry.get("type") == "flag":
            node = False
        else:
            node = property_check(entry, None, person=True)
        return Negation(node) if entry.get("negation") else node


def _depth(node: Node) -> int:
    if isinstance(node, Combination):
        return 1 + max(map(_depth, node.parts), default=0)
    if isinstance(node, Negation):
        return 1 + _depth(node.part)
    return 0


def _size(node: Node) -> int:
    if isinstance(node, Combination):
        return 1 + sum(map(_size, node.parts))
    if isinstance(node, Negation):
        return 1 + _size(node.part)
    return 1


def _matcher(node: Node) -> Matcher:
    """The closure form of a cohort's tree, for trees too deep or large to generate."""
    if isinstance(node, bool):
        return lambda _ctx: node
    if isinstance(node, Negation):
        inner = _matcher(node.part)
        return lambda ctx: not inner(ctx)
    if isinstance(node, Combination):
        parts = tuple(map(_matcher, node.parts))
        if node.any_of:
            return lambda ctx: any(part(ctx) for part in parts)
        return lambda ctx: all(part(ctx) for part in parts)
    return node.matcher()


def _cached_member(cohort_id: int, inner: Matcher) -> Matcher:
    def dynamic_member(ctx: Context) -> bool:
        known = ctx.cohort_results.get(cohort_id)
        if known is None:
            known = ctx.cohort_results[cohort_id] = bool(inner(ctx))
        return known

    return dynamic_member


def _properties_of(definition: dict[str, Any]) -> dict[str, Any] | None:
    filters = definition.get("filters")
    if isinstance(filters, dict) and "properties" in filters:
        group = filters["properties"]
    elif "properties" in definition:
        group = definition["properties"]
    elif "type" in definition and "values" in definition:
        group = definition
    else:
        return None
    if not isinstance(group, dict) or not group:
        return None
    return group
