"""Stored flag definitions -> ``CompiledFlag`` records, once per definitions version.

``FlagBuilder`` reads PostHog's stored JSON (conditions, variants, payloads, holdout,
enrollment, dependency references); ``link_dependencies`` orders flags dependencies-first
and marks broken chains and cycles; ``generate_functions`` has ``flag_codegen`` write each
flag's evaluation function. ``engine.compile_flags`` runs the three in that order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flagstaff.flags.cohorts import CohortCompiler
from flagstaff.flags.compiled_flag import CompiledFlag, Condition, Enrollment, Holdout
from flagstaff.flags.filters import CallCheck, Check, DependencyCheck, property_check
from flagstaff.flags.flag_codegen import FlagSource, GeneratedSources


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def _threshold(rollout: Any) -> float | None:
    """The bucket a condition's hash must not exceed; None when no hashing is needed."""
    if rollout is None:
        return None
    percentage = float(rollout)
    if percentage == 100.0:
        return None
    return percentage / 100.0


def payload_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def evaluation_contexts(flag: Mapping[str, Any]) -> frozenset[str]:
    tags = flag.get("evaluation_contexts")
    if tags is None:
        tags = flag.get("evaluation_tags")
    if not isinstance(tags, list):
        return frozenset()
    names = set()
    for tag in tags:
        if isinstance(tag, str):
            names.add(tag)
        elif isinstance(tag, dict) and isinstance(tag.get("name"), str):
            names.add(tag["name"])
    return frozenset(names)


def _dependency_check(prop: Mapping[str, Any], target: int) -> DependencyCheck:
    expected = prop.get("value")
    if (prop.get("operator") or "exact") != "flag_evaluates_to" or not isinstance(
        expected, bool | str
    ):
        expected = None
    return DependencyCheck(target, expected)


class FlagBuilder:
    def __init__(
        self,
        flags: list[dict[str, Any]],
        cohorts: Mapping[str, dict[str, Any]],
        group_type_mapping: Mapping[str, str],
        sources: GeneratedSources,
    ) -> None:
        self.group_names = {str(index): name for index, name in group_type_mapping.items()}
        self.cohorts = CohortCompiler(cohorts, sources)
        self.definitions: list[dict[str, Any]] = []
        seen: dict[str, int] = {}
        for flag in flags:
            if not isinstance(flag, dict) or flag.get("deleted"):
                continue
            key = flag.get("key")
            if not isinstance(key, str) or not key:
                continue
            if key in seen:
                self.definitions[seen[key]] = flag
            else:
                seen[key] = len(self.definitions)
                self.definitions.append(flag)
        self.by_key = {flag["key"]: index for index, flag in enumerate(self.definitions)}
        self.by_id: dict[int, int] = {}
        for index, flag in enumerate(self.definitions):
            flag_id = flag.get("id")
            if isinstance(flag_id, int) and not isinstance(flag_id, bool):
                self.by_id.setdefault(flag_id, index)
        # Dependency targets per flag, with None for a reference to no known flag.
        self.edges: list[list[int | None]] = [[] for _ in self.definitions]

    def resolve_dependency(self, key: Any) -> int | None:
        if isinstance(key, int) and not isinstance(key, bool):
            return self.by_id.get(key)
        if isinstance(key, str):
            if key.isdigit() and int(key) in self.by_id:
                return self.by_id[int(key)]
            return self.by_key.get(key)
        return None

    def build(self) -> list[CompiledFlag]:
        compiled = []
        for index, definition in enumerate(self.definitions):
            flag = CompiledFlag(
                index,
                definition["key"],
                _int(definition.get("id")),
                _int(definition.get("version")),
            )
            name = definition.get("name")
            flag.description = name if isinstance(name, str) else None
            flag.active = bool(definition.get("active", True))
            runtime = definition.get("evaluation_runtime")
            flag.runtime = runtime if runtime in ("server", "client") else None
            flag.contexts = evaluation_contexts(definition)
            try:
                self._fill(flag, definition)
            except Exception as error:
                flag.error = f"Flag definition could not be compiled: {error}"
                self.edges[index] = []
            compiled.append(flag)
        return compiled

    def _group_name(self, index: Any) -> str | None:
        if index is None:
            return None
        return self.group_names.get(str(index))

    def _fill(self, flag: CompiledFlag, definition: dict[str, Any]) -> None:
        filters = definition.get("filters") or {}
        if not isinstance(filters, dict):
            raise ValueError("filters must be an object")
        bucketing = definition.get("bucketing_identifier") or filters.get("bucketing_identifier")
        flag.bucket_by_device = bucketing == "device_id"
        aggregation = filters.get("aggregation_group_type_index")
        flag.flag_grouped = aggregation is not None
        flag.flag_group_name = self._group_name(aggregation)
        flag.early_exit = filters.get("early_exit") is True

        variants = (filters.get("multivariate") or {}).get("variants") or []
        cumulative = 0.0
        table = []
        for variant in variants:
            cumulative += float(variant.get("rollout_percentage") or 0) / 100.0
            table.append((str(variant["key"]), cumulative))
        flag.variants = tuple(table)
        variant_keys = {variant_key for variant_key, _ in table}

        payloads = filters.get("payloads") or {}
        if isinstance(payloads, dict):
            flag.payloads = {str(k): payload_text(v) for k, v in payloads.items() if v is not None}
        flag.true_payload = flag.payloads.get("true")

        edges = self.edges[flag.index]
        conditions = []
        for position, group in enumerate(filters.get("groups") or []):
            conditions.append(self._condition(position, group, aggregation, variant_keys, edges))
        flag.conditions = tuple(conditions)
        flag.holdout = self._holdout(filters)
        flag.enrollment = self._enrollment(definition["key"], filters, edges)

    def _condition(
        self,
        position: int,
        group: dict[str, Any],
        flag_aggregation: Any,
        variant_keys: set[str],
        edges: list[int | None],
    ) -> Condition:
        aggregation = group.get("aggregation_group_type_index", flag_aggregation)
        group_name = self._group_name(aggregation)
        plain: list[Check] = []
        deferred: list[Check] = []
        for prop in group.get("properties") or []:
            kind = prop.get("type")
            if kind == "flag":
                target = self.resolve_dependency(prop.get("key"))
                edges.append(target)
                plain.append(_dependency_check(prop, target if target is not None else -1))
            elif kind == "cohort":
                deferred.append(CallCheck(self.cohorts.reference(prop)))
            elif kind == "group":
                index = prop.get("group_type_index")
                name = self._group_name(aggregation if index is None else index)
                plain.append(property_check(prop, name, person=False))
            elif kind == "person" or aggregation is None:
                plain.append(property_check(prop, None, person=True))
            else:
                plain.append(property_check(prop, group_name, person=False))
        variant = group.get("variant")
        return Condition(
            position,
            aggregation is not None,
            group_name,
            tuple(plain + deferred),
            _threshold(group.get("rollout_percentage")),
            variant if variant in variant_keys else None,
        )

    def _holdout(self, filters: dict[str, Any]) -> Holdout | None:
        holdout = filters.get("holdout")
        if isinstance(holdout, dict):
            holdout_id = holdout.get("id")
            percentage = holdout.get("exclusion_percentage")
            if holdout_id is None or percentage is None:
                return None
            clamped = min(max(float(percentage), 0.0), 100.0)
            threshold = None if clamped == 100.0 else clamped / 100.0
            return Holdout(threshold, f"holdout-{holdout_id}")
        legacy = filters.get("holdout_groups")
        if isinstance(legacy, list) and legacy and isinstance(legacy[0], dict):
            first = legacy[0]
            if first.get("properties"):
                return None
            rollout = first.get("rollout_percentage")
            threshold = None if rollout is None else float(rollout) / 100.0
            variant = first.get("variant")
            return Holdout(threshold, variant if isinstance(variant, str) else None)
        return None

    def _enrollment(
        self, key: str, filters: dict[str, Any], edges: list[int | None]
    ) -> Enrollment | None:
        if filters.get("feature_enrollment") is True:
            return Enrollment(f"$feature_enrollment/{key}", None, ())
        super_groups = filters.get("super_groups")
        if not isinstance(super_groups, list) or not super_groups:
            return None
        first = super_groups[0]
        properties = first.get("properties") if isinstance(first, dict) else None
        if not properties:
            return None
        condition = self._condition(
            0, {**first, "aggregation_group_type_index": None}, None, set(), edges
        )
        trigger_keys = tuple(str(prop.get("key")) for prop in properties)
        return Enrollment(None, condition, trigger_keys)


def link_dependencies(
    flags: list[CompiledFlag], edges: list[list[int | None]]
) -> tuple[list[int], bool]:
    """Mark broken dependency chains; return a dependencies-first order and whether a cycle
    exists.

    Inactive flags count as false and their own dependencies are not followed. A flag that
    references a missing flag, sits on a cycle, or depends on such a flag evaluates to
    ``missing_dependency``; a flag on a cycle is also marked ``in_cycle`` (left out of
    answers, as the PostHog server leaves it out).
    """
    count = len(flags)
    deps: list[list[int]] = [[] for _ in range(count)]
    for flag in flags:
        if not flag.active:
            continue
        targets = edges[flag.index]
        if any(target is None for target in targets):
            flag.missing_dependency = True
        deps[flag.index] = sorted({t for t in targets if t is not None})
        flag.dependencies = tuple(deps[flag.index])
        for target in deps[flag.index]:
            flags[target].records_value = True

    dependents: list[list[int]] = [[] for _ in range(count)]
    remaining = [len(deps[i]) for i in range(count)]
    for index in range(count):
        for target in deps[index]:
            dependents[target].append(index)
    order = [index for index in range(count) if remaining[index] == 0]
    cursor = 0
    while cursor < len(order):
        current = order[cursor]
        cursor += 1
        for parent in dependents[current]:
            remaining[parent] -= 1
            if remaining[parent] == 0:
                order.append(parent)
    has_cycle = len(order) < count
    if has_cycle:
        placed = set(order)
        unplaced = [index for index in range(count) if index not in placed]
        for index in unplaced:
            flags[index].missing_dependency = True
            flags[index].in_cycle = _reaches(index, index, deps, placed)
            order.append(index)
    for index in order:
        if any(flags[target].missing_dependency and flags[target].active for target in deps[index]):
            flags[index].missing_dependency = True
    return order, has_cycle


def _reaches(start: int, target: int, deps: list[list[int]], placed: set[int]) -> bool:
    """Whether ``target`` is among the (unplaced) dependencies reachable from ``start``."""
    pending = [d for d in deps[start] if d not in placed]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current == target:
            return True
        if current in seen:
            continue
        seen.add(current)
        pending.extend(d for d in deps[current] if d not in placed)
    return False


def generate_functions(flag: CompiledFlag, sources: GeneratedSources) -> None:
    """Generate a linked flag's evaluation function: the whole evaluation (``run``), or the
    conditions behind enrollment and holdout (``match``); none for a flag that failed to
    compile or misses a dependency."""
    if flag.error is not None or flag.missing_dependency:
        return
    stem = f"flag:{flag.key}:{flag.version}"
    if flag.enrollment is not None or flag.holdout is not None:
        flag.match = FlagSource(flag, catch=False, record=False).function(sources, stem)
    else:
        source = FlagSource(flag, catch=True, record=flag.records_value)
        flag.run = source.function(sources, stem)
