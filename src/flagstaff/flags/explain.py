"""Why a flag evaluates as it does: a step-by-step explanation (``flagstaff flags explain``).

``explain(flags, cohorts, group_type_mapping, key, request)`` walks the stored definitions
directly, in the order the compiled engine decides them (enrollment, holdout, then each
condition set: property filters, rollout hash, variant hash), and records every value it
compared. It is slow on purpose (nothing is compiled or shared) and independent of the
generated code, so tests can hold the two against each other; it reuses only the leaf
decisions (``operators.compile_test`` for one filter, ``hashing.bucket``, cohort
membership) and the builder's verdict on which definitions cannot be compiled. Pure: plain
data in, records out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from flagstaff.flags.cohorts import CohortCompiler
from flagstaff.flags.context import MISSING, Context, EvaluationError
from flagstaff.flags.flag_builder import FlagBuilder, evaluation_contexts
from flagstaff.flags.flag_codegen import GeneratedSources
from flagstaff.flags.hashing import HOLDOUT_PREFIX, VARIANT_SALT, bucket
from flagstaff.flags.model import (
    CONDITION_MATCH,
    EVALUATION_ERROR,
    GROUPS_NOT_EVALUATED_DESCRIPTION,
    HOLDOUT_CONDITION_VALUE,
    MISSING_DEPENDENCY,
    NO_CONDITION_MATCH,
    NO_GROUP_TYPE,
    OUT_OF_ROLLOUT_BOUND,
    SUPER_CONDITION_VALUE,
    EvalRequest,
    describe,
)
from flagstaff.flags.operators import compile_test
from flagstaff.flags.values import json_text

_RANKS = {NO_GROUP_TYPE: 1, NO_CONDITION_MATCH: 2, OUT_OF_ROLLOUT_BOUND: 3}
NOT_EVALUATED = "not evaluated (an earlier filter did not match)"


@dataclass
class FilterStep:
    """One property filter of a condition set."""

    type: str
    key: str
    operator: str
    value: Any
    """The filter's value (what the property is compared with)."""
    compared: Any = None
    """The property value compared; None with ``missing`` when the key is absent."""
    missing: bool = False
    matched: bool | None = None
    """None when not evaluated (an earlier filter of the set did not match)."""
    note: str | None = None


@dataclass
class HashStep:
    """A bucketing hash: ``value`` in [0, 1] for ``identifier`` (0.0 when it is empty)."""

    identifier: str
    value: float
    threshold: float | None = None
    """Rollout: inside when value <= threshold. Variants: see ``bands``."""
    bands: list[tuple[str, float, float]] = field(default_factory=list)
    chosen: str | None = None


@dataclass
class ConditionStep:
    index: int
    aggregation: str | None
    """The group type the set is aggregated by; None for persons."""
    rollout_percentage: Any
    filters: list[FilterStep] = field(default_factory=list)
    skipped: str | None = None
    properties_match: bool | None = None
    rollout: HashStep | None = None
    in_rollout: bool | None = None
    variant_override: str | None = None
    variant: HashStep | None = None
    outcome: str = ""


@dataclass
class DependencyStep:
    key: str
    reference: Any
    value: Any
    """What the flag evaluated to in this request (False when it did not match)."""
    note: str | None = None


@dataclass
class Explanation:
    key: str
    active: bool = True
    enabled: bool = False
    variant: str | None = None
    reason_code: str = NO_CONDITION_MATCH
    condition_index: int | None = None
    reason_description: str = ""
    answered: bool = True
    """False when the flag is left out of /flags answers (inactive, on a dependency cycle)."""
    notes: list[str] = field(default_factory=list)
    dependencies: list[DependencyStep] = field(default_factory=list)
    enrollment: list[str] = field(default_factory=list)
    holdout: HashStep | None = None
    in_holdout: bool | None = None
    conditions: list[ConditionStep] = field(default_factory=list)
    early_exit: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _threshold(rollout: Any) -> float | None:
    if rollout is None:
        return None
    percentage = float(rollout)
    return None if percentage == 100.0 else percentage / 100.0


def _text(identifier: bytes) -> str:
    return identifier.decode("utf-8", "surrogatepass")


class _Walker:
    """Explains flags of one project for one request, memoising dependency values."""

    def __init__(
        self,
        flags: list[dict[str, Any]],
        cohorts: Mapping[str, dict[str, Any]],
        group_type_mapping: Mapping[str, str],
        request: EvalRequest,
    ) -> None:
        self.by_key: dict[str, dict[str, Any]] = {}
        for flag in flags:
            key = flag.get("key") if isinstance(flag, dict) else None
            if isinstance(key, str) and key and not flag.get("deleted"):
                self.by_key[key] = flag  # a later duplicate replaces an earlier one
        self.by_id: dict[int, str] = {}
        for key, flag in self.by_key.items():
            flag_id = flag.get("id")
            if isinstance(flag_id, int) and not isinstance(flag_id, bool):
                self.by_id.setdefault(flag_id, key)
        self.group_names = {str(index): name for index, name in group_type_mapping.items()}
        self.sources = GeneratedSources()
        self.cohorts = CohortCompiler(cohorts, self.sources)
        builder = FlagBuilder(flags, cohorts, group_type_mapping, self.sources)
        self.errors = {flag.key: flag.error for flag in builder.build() if flag.error}
        self.request = request
        self.ctx = Context(request)
        self.values: dict[str, Any] = {}
        self.explained: dict[str, Explanation] = {}

    # -- dependencies ------------------------------------------------------------------------

    def resolve(self, reference: Any) -> str | None:
        if isinstance(reference, int) and not isinstance(reference, bool):
            return self.by_id.get(reference)
        if isinstance(reference, str):
            if reference.isdigit() and int(reference) in self.by_id:
                return self.by_id[int(reference)]
            return reference if reference in self.by_key else None
        return None

    def references(self, key: str) -> list[Any]:
        """The flag references of a flag's condition sets and enrollment condition."""
        filters = self.by_key[key].get("filters") or {}
        if not isinstance(filters, dict):
            return []
        sets = list(filters.get("groups") or [])
        super_groups = filters.get("super_groups")
        if (
            filters.get("feature_enrollment") is not True
            and isinstance(super_groups, list)
            and super_groups
            and isinstance(super_groups[0], dict)
            and super_groups[0].get("properties")
        ):
            sets.append(super_groups[0])
        return [
            prop.get("key")
            for condition in sets
            for prop in condition.get("properties") or []
            if prop.get("type") == "flag"
        ]

    def _active_targets(self, key: str) -> list[str | None]:
        if not self.by_key[key].get("active", True) or key in self.errors:
            return []
        return [self.resolve(reference) for reference in self.references(key)]

    def on_cycle(self, key: str) -> bool:
        pending = [t for t in self._active_targets(key) if t is not None]
        seen: set[str] = set()
        while pending:
            current = pending.pop()
            if current == key:
                return True
            if current in seen:
                continue
            seen.add(current)
            pending.extend(t for t in self._active_targets(current) if t is not None)
        return False

    def broken(self, key: str, visiting: frozenset[str] = frozenset()) -> str | None:
        """Why ``key`` misses a dependency (a reference to no flag, a cycle, a broken
        active dependency), or None."""
        if key in visiting:
            return "on a dependency cycle"
        for reference, target in zip(self.references(key), self._active_targets(key), strict=False):
            if target is None:
                return f"references no known flag ({reference!r})"
            if self.by_key[target].get("active", True) and (
                self.broken(target, visiting | {key}) is not None
            ):
                return f"depends on {target!r}, which misses a dependency"
        return None

    def value_of(self, key: str) -> Any:
        """What a dependency evaluated to in this request (False unless enabled)."""
        if key not in self.values:
            flag = self.by_key[key]
            if not flag.get("active", True):
                self.values[key] = False
            else:
                result = self.explain(key)
                self.values[key] = (result.variant or True) if result.enabled else False
        return self.values[key]

    # -- one flag ------------------------------------------------------------------------------

    def explain(self, key: str) -> Explanation:
        known = self.explained.get(key)
        if known is not None:
            return known
        flag = self.by_key[key]
        out = Explanation(key, active=bool(flag.get("active", True)))
        self.explained[key] = out
        if not out.active:
            out.answered = False
            out.notes.append("inactive: left out of the answer (counts as false for others)")
            return self._finish(out, False, None, NO_CONDITION_MATCH, None)
        try:
            self._explain_active(flag, out)
        except EvaluationError as error:
            out.notes.append(f"evaluation failed: {error}")
            self._finish(out, False, None, EVALUATION_ERROR, None, str(error))
        return out

    def _finish(
        self,
        out: Explanation,
        enabled: bool,
        variant: str | None,
        code: str,
        index: int | None,
        description: str | None = None,
    ) -> Explanation:
        out.enabled, out.variant, out.reason_code, out.condition_index = (
            enabled,
            variant,
            code,
            index,
        )
        out.reason_description = description or describe(code, index)
        return out

    def _explain_active(self, flag: dict[str, Any], out: Explanation) -> None:
        key = out.key
        filters = flag.get("filters") or {}
        if not isinstance(filters, dict):
            raise ValueError("filters must be an object")
        error = self.errors.get(key)
        if error is not None:
            out.notes.append(error)
            self._finish(out, False, None, EVALUATION_ERROR, None, error)
            return
        if self.on_cycle(key):
            out.answered = False
            out.notes.append("on a dependency cycle: left out of the answer")
            self._finish(out, False, None, MISSING_DEPENDENCY, None)
            return
        for reference in self.references(key):
            target = self.resolve(reference)
            if target is None:
                out.dependencies.append(DependencyStep(str(reference), reference, False, "unknown"))
            else:
                out.dependencies.append(DependencyStep(target, reference, self.value_of(target)))
        problem = self.broken(key)
        if problem is not None:
            out.notes.append(f"missing dependency: {problem}")
            self._finish(out, False, None, MISSING_DEPENDENCY, None)
            return
        out.early_exit = filters.get("early_exit") is True
        if self._enrollment(flag, filters, out) or self._holdout(flag, filters, out):
            return
        self._conditions(flag, filters, out)

    # -- identifiers and hashes ------------------------------------------------------------------

    def _person_identifier(self, flag: dict[str, Any], *, for_conditions: bool) -> bytes:
        filters = flag.get("filters") or {}
        by_device = (
            flag.get("bucketing_identifier") or filters.get("bucketing_identifier")
        ) == "device_id"
        device_id = self.request.device_id
        if by_device and (device_id or for_conditions):
            return (device_id or "").encode("utf-8", "surrogatepass")
        override = self.request.hash_key_overrides.get(flag["key"])
        if override is not None:
            return override.encode("utf-8", "surrogatepass")
        return self.request.distinct_id.encode("utf-8", "surrogatepass")

    def _prefix(self, key: str) -> bytes:
        return f"{key}.".encode("utf-8", "surrogatepass")

    def _variants(self, filters: dict[str, Any]) -> list[tuple[str, float, float]]:
        bands, low = [], 0.0
        for variant in (filters.get("multivariate") or {}).get("variants") or []:
            high = low + float(variant.get("rollout_percentage") or 0) / 100.0
            bands.append((str(variant["key"]), low, high))
            low = high
        return bands

    def _variant_hash(self, key: str, filters: dict[str, Any], identifier: bytes) -> HashStep:
        value = bucket(self._prefix(key), identifier, VARIANT_SALT) if identifier else 0.0
        step = HashStep(_text(identifier), value, bands=self._variants(filters))
        step.chosen = next((name for name, _, high in step.bands if value < high), None)
        return step

    # -- enrollment and holdout ------------------------------------------------------------------

    def _enrollment(self, flag: dict[str, Any], filters: dict[str, Any], out: Explanation) -> bool:
        person = self.request.person_properties
        key = flag["key"]
        if filters.get("feature_enrollment") is True:
            name = f"$feature_enrollment/{key}"
            if name not in person:
                out.enrollment.append(f"{name} is not set: enrollment does not decide")
                return False
            value = person[name]
            enabled = value is True or value == "true"
            out.enrollment.append(f"{name} = {json_text(value)}: enrolled is {enabled}")
            self._finish(out, enabled, None, SUPER_CONDITION_VALUE, 0)
            return True
        super_groups = filters.get("super_groups")
        if not isinstance(super_groups, list) or not super_groups:
            return False
        first = super_groups[0]
        properties = first.get("properties") if isinstance(first, dict) else None
        if not properties:
            return False
        triggers = [str(prop.get("key")) for prop in properties]
        if not any(trigger in person for trigger in triggers):
            out.enrollment.append(f"none of {triggers} is set: enrollment does not decide")
            return False
        condition = ConditionStep(0, None, first.get("rollout_percentage"))
        enabled = self._filters(properties, None, condition)
        threshold = _threshold(first.get("rollout_percentage"))
        if enabled and threshold is not None:
            identifier = self._person_identifier(flag, for_conditions=False)
            value = bucket(self._prefix(key), identifier) if identifier else 0.0
            condition.rollout = HashStep(_text(identifier), value, threshold)
            enabled = value <= threshold
            condition.in_rollout = enabled
        condition.outcome = f"enrollment condition: enabled is {enabled}"
        out.enrollment.append(condition.outcome)
        out.conditions.append(condition)
        self._finish(out, enabled, None, SUPER_CONDITION_VALUE, 0)
        return True

    def _holdout(self, flag: dict[str, Any], filters: dict[str, Any], out: Explanation) -> bool:
        holdout = filters.get("holdout")
        threshold: float | None
        variant: str | None
        if isinstance(holdout, dict):
            if holdout.get("id") is None or holdout.get("exclusion_percentage") is None:
                return False
            clamped = min(max(float(holdout["exclusion_percentage"]), 0.0), 100.0)
            threshold = None if clamped == 100.0 else clamped / 100.0
            variant = f"holdout-{holdout['id']}"
        else:
            legacy = filters.get("holdout_groups")
            if not (isinstance(legacy, list) and legacy and isinstance(legacy[0], dict)):
                return False
            if legacy[0].get("properties"):
                return False
            rollout = legacy[0].get("rollout_percentage")
            threshold = None if rollout is None else float(rollout) / 100.0
            named = legacy[0].get("variant")
            variant = named if isinstance(named, str) else None
        aggregation = filters.get("aggregation_group_type_index")
        if aggregation is not None:
            group_key = self.ctx.group_key(self.group_names.get(str(aggregation))) or ""
            identifier = group_key.encode("utf-8", "surrogatepass")
        else:
            identifier = self._person_identifier(flag, for_conditions=False)
        value = bucket(HOLDOUT_PREFIX, identifier)
        out.holdout = HashStep(_text(identifier), value, threshold)
        out.in_holdout = threshold is None or not value > threshold
        if not out.in_holdout:
            return False
        if variant is None:
            step = self._variant_hash(flag["key"], filters, identifier)
            out.holdout.bands, out.holdout.chosen = step.bands, step.chosen
            variant = step.chosen
        self._finish(out, True, variant, HOLDOUT_CONDITION_VALUE, None)
        return True

    # -- condition sets ----------------------------------------------------------------------------

    def _filters(
        self, properties: list[dict[str, Any]], aggregation: Any, step: ConditionStep
    ) -> bool:
        """Decide a set's filters as the engine does (non-cohort filters first, then
        cohorts, stopping at the first that fails) and record each."""
        group_name = self.group_names.get(str(aggregation)) if aggregation is not None else None
        ordered = [p for p in properties if p.get("type") != "cohort"] + [
            p for p in properties if p.get("type") == "cohort"
        ]
        passed = True
        for prop in ordered:
            kind = str(prop.get("type") or "person")
            raw_key = prop.get("key")
            filter_step = FilterStep(
                kind,
                raw_key if isinstance(raw_key, str) else str(raw_key),
                str(prop.get("operator") or "exact"),
                prop.get("value"),
            )
            step.filters.append(filter_step)
            if not passed:
                filter_step.note = NOT_EVALUATED
                continue
            if kind == "flag":
                filter_step.matched = self._dependency(prop, filter_step)
            elif kind == "cohort":
                filter_step.matched = self.cohorts.reference(prop)(self.ctx)
                filter_step.note = "cohort membership"
            elif kind == "group":
                index = prop.get("group_type_index")
                name = self.group_names.get(str(aggregation if index is None else index))
                filter_step.matched = self._group_filter(prop, name, filter_step)
            elif kind == "person" or aggregation is None:
                filter_step.matched = self._person_filter(prop, filter_step)
            else:
                filter_step.matched = self._group_filter(prop, group_name, filter_step)
            passed = bool(filter_step.matched)
        return passed

    def _dependency(self, prop: dict[str, Any], step: FilterStep) -> bool:
        target = self.resolve(prop.get("key"))
        value = False if target is None else self.value_of(target)
        step.compared = value
        step.note = f"value of flag {target!r}" if target is not None else "unknown flag"
        expected = prop.get("value")
        if (prop.get("operator") or "exact") != "flag_evaluates_to" or not isinstance(
            expected, bool | str
        ):
            step.note += "; the filter can never match (not flag_evaluates_to true/false/variant)"
            return False
        if expected is True:
            return value is not False
        if expected is False:
            return value is False
        return bool(value == expected)

    def _person_filter(self, prop: dict[str, Any], step: FilterStep) -> bool:
        test, if_missing = compile_test(step.operator, prop.get("value"))
        value = self.request.person_properties.get(step.key, MISSING)
        if value is MISSING and step.key == "distinct_id":
            value = self.request.distinct_id
            step.note = "distinct_id of the request"
        if value is MISSING:
            step.missing = True
            return if_missing
        step.compared = value
        return bool(test(value))

    def _group_filter(self, prop: dict[str, Any], name: str | None, step: FilterStep) -> bool:
        test, if_missing = compile_test(step.operator, prop.get("value"))
        if name is None:
            step.missing = True
            step.note = "unknown group type"
            return if_missing
        properties = self.request.group_properties.get(name)
        value = MISSING if properties is None else properties.get(step.key, MISSING)
        if value is MISSING and step.key == "$group_key":
            group_key = self.request.groups.get(name)
            value = MISSING if group_key is None else group_key
        step.note = f"group {name!r}"
        if value is MISSING:
            step.missing = True
            return if_missing
        step.compared = value
        return bool(test(value))

    def _conditions(self, flag: dict[str, Any], filters: dict[str, Any], out: Explanation) -> None:
        key = flag["key"]
        flag_aggregation = filters.get("aggregation_group_type_index")
        variant_keys = {name for name, _, _ in self._variants(filters)}
        by_device = (
            flag.get("bucketing_identifier") or filters.get("bucketing_identifier")
        ) == "device_id"
        miss: tuple[str, int | None] = (NO_GROUP_TYPE, None)
        skipped = False

        def missed(code: str, index: int) -> None:
            nonlocal miss
            if _RANKS[miss[0]] <= _RANKS[code]:
                miss = (code, index)

        for index, condition in enumerate(filters.get("groups") or []):
            aggregation = condition.get("aggregation_group_type_index", flag_aggregation)
            name = self.group_names.get(str(aggregation)) if aggregation is not None else None
            step = ConditionStep(index, name, condition.get("rollout_percentage"))
            out.conditions.append(step)
            if aggregation is not None:
                group_key = self.ctx.group_key(name)
                if group_key is None:
                    skipped = True
                    step.skipped = (
                        f"group type index {aggregation} is unknown"
                        if name is None
                        else f"the request names no {name!r} group"
                    )
                    step.outcome = NO_GROUP_TYPE
                    missed(NO_GROUP_TYPE, index)
                    continue
                identifier = group_key.encode("utf-8", "surrogatepass")
            else:
                if by_device and not self.request.device_id:
                    step.skipped = "the flag buckets by device_id and the request has none"
                    step.outcome = OUT_OF_ROLLOUT_BOUND
                    missed(OUT_OF_ROLLOUT_BOUND, index)
                    continue
                identifier = self._person_identifier(flag, for_conditions=True)
            step.properties_match = self._filters(
                condition.get("properties") or [], aggregation, step
            )
            if not step.properties_match:
                step.outcome = NO_CONDITION_MATCH
                missed(NO_CONDITION_MATCH, index)
                continue
            threshold = _threshold(condition.get("rollout_percentage"))
            if threshold is not None:
                value = bucket(self._prefix(key), identifier) if identifier else 0.0
                step.rollout = HashStep(_text(identifier), value, threshold)
                step.in_rollout = not value > threshold
                if not step.in_rollout:
                    step.outcome = OUT_OF_ROLLOUT_BOUND
                    missed(OUT_OF_ROLLOUT_BOUND, index)
                    if out.early_exit:
                        out.notes.append(f"early_exit: evaluation stops at condition set {index}")
                        self._finish(out, False, None, OUT_OF_ROLLOUT_BOUND, index)
                        return
                    continue
            variant = condition.get("variant")
            if variant in variant_keys:
                step.variant_override = variant
            elif variant_keys:
                step.variant = self._variant_hash(key, filters, identifier)
                variant = step.variant.chosen
            else:
                variant = None
            step.outcome = CONDITION_MATCH
            self._finish(out, True, variant, CONDITION_MATCH, index)
            return
        code, miss_index = miss
        if skipped and code == NO_CONDITION_MATCH:
            self._finish(out, False, None, code, miss_index, GROUPS_NOT_EVALUATED_DESCRIPTION)
        else:
            self._finish(out, False, None, code, miss_index)


def explain(
    flags: list[dict[str, Any]],
    cohorts: Mapping[str, dict[str, Any]],
    group_type_mapping: Mapping[str, str],
    key: str,
    request: EvalRequest,
) -> Explanation:
    """Explain flag ``key`` for ``request`` (properties already overlaid, as /flags does).

    Raises KeyError when no (undeleted) flag has that key.
    """
    walker = _Walker(flags, cohorts, group_type_mapping, request)
    try:
        if key not in walker.by_key:
            raise KeyError(key)
        explanation = walker.explain(key)
    finally:
        walker.sources.release()  # the cohort code it generated is not kept for tracebacks
    contexts = evaluation_contexts(walker.by_key[key])
    if contexts:
        explanation.notes.append(f"evaluation contexts: {sorted(contexts)}")
    return explanation


def explain_many(
    flags: list[dict[str, Any]],
    cohorts: Mapping[str, dict[str, Any]],
    group_type_mapping: Mapping[str, str],
    keys: Iterable[str],
    request: EvalRequest,
) -> list[Explanation]:
    """:func:`explain` for several flags of one request, compiling the project's flags once
    (a person's page explains every flag). Keys of no (undeleted) flag are left out."""
    walker = _Walker(flags, cohorts, group_type_mapping, request)
    out = []
    try:
        for key in keys:
            if key in walker.by_key:
                out.append(walker.explain(key))
    finally:
        walker.sources.release()
    for explanation in out:
        contexts = evaluation_contexts(walker.by_key[explanation.key])
        if contexts:
            explanation.notes.append(f"evaluation contexts: {sorted(contexts)}")
    return out


# -- text ---------------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return json_text(value)


def render(explanation: Explanation) -> str:
    """The explanation as indented text, one step a line."""
    e = explanation
    lines = [f"flag {e.key!r}" + ("" if e.active else " (inactive)")]
    for note in e.notes:
        lines.append(f"  note: {note}")
    for dependency in e.dependencies:
        extra = f" ({dependency.note})" if dependency.note else ""
        lines.append(
            f"  dependency {dependency.key!r} (reference {_shown(dependency.reference)}) "
            f"evaluated to {_shown(dependency.value)}{extra}"
        )
    for line in e.enrollment:
        lines.append(f"  enrollment: {line}")
    if e.holdout is not None:
        h = e.holdout
        limit = "100% (everyone)" if h.threshold is None else f"<= {h.threshold:.6f}"
        lines.append(
            f"  holdout: hash of {h.identifier!r} = {h.value:.6f}, in holdout when {limit}: "
            f"{'in' if e.in_holdout else 'not in'} holdout"
        )
        if h.bands:
            lines.append(f"    variant from the flag's bands: {h.chosen!r}")
    if e.early_exit:
        lines.append("  early_exit: a rollout miss after matching properties ends evaluation")
    for c in e.conditions:
        who = f"group {c.aggregation!r}" if c.aggregation else "person"
        rollout = "100" if c.rollout_percentage is None else _shown(c.rollout_percentage)
        lines.append(f"  condition set {c.index} ({who}, rollout {rollout}%)")
        if c.skipped:
            lines.append(f"    skipped: {c.skipped}")
        for f in c.filters:
            if f.matched is None:
                lines.append(f"    - {f.type} {f.key!r} {f.operator} {_shown(f.value)}: {f.note}")
                continue
            compared = "missing" if f.missing else _shown(f.compared)
            note = f" [{f.note}]" if f.note else ""
            lines.append(
                f"    - {f.type} {f.key!r} {f.operator} {_shown(f.value)}: "
                f"compared {compared} -> {'match' if f.matched else 'no match'}{note}"
            )
        if c.rollout is not None:
            r = c.rollout
            lines.append(
                f"    rollout hash of {r.identifier!r} = {r.value:.6f}, threshold "
                f"{r.threshold:.6f}: {'inside' if c.in_rollout else 'outside'}"
            )
        if c.variant_override:
            lines.append(f"    variant override: {c.variant_override!r}")
        if c.variant is not None:
            v = c.variant
            bands = ", ".join(f"{name} [{low:.4f}, {high:.4f})" for name, low, high in v.bands)
            lines.append(
                f"    variant hash of {v.identifier!r} = {v.value:.6f}; bands {bands}: {v.chosen!r}"
            )
        if c.outcome:
            lines.append(f"    -> {c.outcome}")
    state = (e.variant or "true") if e.enabled else "false"
    lines.append(
        f"result: {state}, reason {e.reason_code} (condition_index "
        f"{e.condition_index or 0}): {e.reason_description}"
        + ("" if e.answered else "; left out of /flags answers")
    )
    return "\n".join(lines)
