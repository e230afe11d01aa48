"""The compiled form of one flag (``CompiledFlag`` and its parts), ready to evaluate.

``flag_builder`` fills these records from stored definitions; ``flag_codegen`` writes each
flag's conditions as a generated function (``run``, or ``match`` behind enrollment and
holdout). The paths that are not generated (a flag that failed to compile, a missing
dependency, enrollment, holdout) are evaluated here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from flagstaff.flags.context import Context, EvaluationError, Matcher
from flagstaff.flags.filters import Check
from flagstaff.flags.hashing import HOLDOUT_PREFIX, VARIANT_SALT, bucket
from flagstaff.flags.model import (
    CONDITION_MATCH,
    EVALUATION_ERROR,
    HOLDOUT_CONDITION_VALUE,
    MISSING_DEPENDENCY,
    SUPER_CONDITION_VALUE,
    FlagResult,
    describe,
)


class Condition:
    __slots__ = (
        "checks",
        "group_name",
        "grouped",
        "index",
        "match_description",
        "threshold",
        "variant",
    )

    def __init__(
        self,
        index: int,
        grouped: bool,
        group_name: str | None,
        checks: tuple[Check, ...],
        threshold: float | None,
        variant: str | None,
    ) -> None:
        self.index = index
        self.grouped = grouped
        self.group_name = group_name
        self.checks = checks
        self.threshold = threshold
        self.variant = variant
        self.match_description = describe(CONDITION_MATCH, index)


class Holdout:
    """``filters.holdout`` (or the legacy first ``holdout_groups`` entry)."""

    __slots__ = ("threshold", "variant", "variant_from_hash")

    def __init__(self, threshold: float | None, variant: str | None) -> None:
        self.threshold = threshold
        self.variant = variant
        self.variant_from_hash = variant is None


class Enrollment:
    """Early access: ``feature_enrollment`` (property key) or legacy ``super_groups``."""

    __slots__ = ("condition", "matchers", "property_key", "trigger_keys")

    def __init__(
        self,
        property_key: str | None,
        condition: Condition | None,
        trigger_keys: tuple[str, ...],
    ) -> None:
        self.property_key = property_key
        self.condition = condition
        self.trigger_keys = trigger_keys
        self.matchers: tuple[Matcher, ...] = (
            tuple(check.matcher() for check in condition.checks) if condition else ()
        )


class CompiledFlag:
    """One flag, ready to evaluate: ``run(ctx)`` gives its result for a request.

    Conditions are tried in order; the first whose filters all pass and whose rollout
    includes the identifier's hash wins. A flag matching none reports the highest-ranked
    miss (out of rollout > no match > no group type), a later condition with an equal rank
    taking over the index, as on the PostHog server. Enrollment and holdout come first.
    """

    __slots__ = (
        "active",
        "bucket_by_device",
        "conditions",
        "contexts",
        "dependencies",
        "description",
        "early_exit",
        "enrollment",
        "error",
        "flag_group_name",
        "flag_grouped",
        "holdout",
        "id",
        "in_cycle",
        "index",
        "key",
        "match",
        "missing_dependency",
        "payloads",
        "prefix",
        "records_value",
        "run",
        "runtime",
        "shared_results",
        "true_payload",
        "variants",
        "version",
    )

    def __init__(self, index: int, key: str, flag_id: int, version: int) -> None:
        self.index = index
        self.key = key
        self.id = flag_id
        self.version = version
        self.description: str | None = None
        self.active = True
        self.runtime: str | None = None
        self.contexts: frozenset[str] = frozenset()
        self.prefix = f"{key}.".encode("utf-8", "surrogatepass")
        self.bucket_by_device = False
        self.flag_grouped = False
        self.flag_group_name: str | None = None
        self.conditions: tuple[Condition, ...] = ()
        self.variants: tuple[tuple[str, float], ...] = ()
        self.payloads: dict[str, str] = {}
        self.true_payload: str | None = None
        self.holdout: Holdout | None = None
        self.enrollment: Enrollment | None = None
        self.dependencies: tuple[int, ...] = ()
        self.early_exit = False
        self.missing_dependency = False
        self.in_cycle = False
        """On a dependency cycle: left out of every answer."""
        self.records_value = False
        self.error: str | None = None
        self.shared_results: dict[tuple[Any, ...], FlagResult] = {}
        self.run: Callable[[Context], FlagResult] = self._evaluate_special
        self.match: Callable[[Context], FlagResult] = self._evaluate_special

    # -- results -------------------------------------------------------------------------

    def _result(
        self,
        enabled: bool,
        variant: str | None,
        code: str,
        index: int | None,
        description: str | None = None,
    ) -> FlagResult:
        """The result for this outcome: built once, then shared (read-only) by every request."""
        shape = (enabled, variant, code, index, description)
        shared = self.shared_results.get(shape)
        if shared is not None:
            return shared
        if enabled:
            payload = self.true_payload if variant is None else self.payloads.get(variant)
        else:
            payload = None
        result = FlagResult(
            key=self.key,
            enabled=enabled,
            variant=variant,
            reason_code=code,
            condition_index=index,
            reason_description=description or describe(code, index),
            payload=payload,
            id=self.id,
            version=self.version,
            description=self.description,
        )
        if len(self.shared_results) < 1024:
            self.shared_results[shape] = result
        return result

    def failed_result(self, ctx: Context, message: str) -> FlagResult:
        ctx.failed = True
        return msgspec.structs.replace(
            self._result(False, None, EVALUATION_ERROR, None, message), failed=True
        )

    # -- evaluation ----------------------------------------------------------------------

    def person_identifier(self, ctx: Context) -> bytes:
        if self.bucket_by_device and ctx.device_id:
            return ctx.device_id.encode("utf-8", "surrogatepass")
        override = ctx.overrides.get(self.key) if ctx.overrides else None
        if override is not None:
            return override.encode("utf-8", "surrogatepass")
        return ctx.distinct_id_bytes

    def _variant_for(self, identifier: bytes) -> str | None:
        if not identifier:
            hashed = 0.0
        else:
            hashed = bucket(self.prefix, identifier, VARIANT_SALT)
        for variant_key, upper in self.variants:
            if hashed < upper:
                return variant_key
        return None

    def _evaluate_special(self, ctx: Context) -> FlagResult:
        if self.error is not None:
            return self.failed_result(ctx, self.error)
        if self.missing_dependency:
            return self._result(False, None, MISSING_DEPENDENCY, None)
        try:
            result = None
            if self.enrollment is not None:
                result = self._enrollment(ctx, self.enrollment)
            if result is None and self.holdout is not None:
                result = self._holdout(ctx, self.holdout)
            if result is None:
                result = self.match(ctx)
        except EvaluationError as error:
            return self.failed_result(ctx, str(error))
        if self.records_value and result.enabled:
            ctx.values[self.index] = result.variant or True
        return result

    def _enrollment(self, ctx: Context, enrollment: Enrollment) -> FlagResult | None:
        if enrollment.property_key is not None:
            value: Any = ctx.person.get(enrollment.property_key, None)
            if enrollment.property_key not in ctx.person:
                return None
            enabled = value is True or value == "true"
            return self._result(enabled, None, SUPER_CONDITION_VALUE, 0)
        condition = enrollment.condition
        if condition is None or not any(key in ctx.person for key in enrollment.trigger_keys):
            return None
        enabled = all(matcher(ctx) for matcher in enrollment.matchers)
        if enabled and condition.threshold is not None:
            identifier = self.person_identifier(ctx)
            hashed = bucket(self.prefix, identifier) if identifier else 0.0
            enabled = hashed <= condition.threshold
        return self._result(enabled, None, SUPER_CONDITION_VALUE, 0)

    def _holdout(self, ctx: Context, holdout: Holdout) -> FlagResult | None:
        if self.flag_grouped:
            group_key = ctx.group_key(self.flag_group_name) or ""
            identifier = group_key.encode("utf-8", "surrogatepass")
        else:
            identifier = self.person_identifier(ctx)
        threshold = holdout.threshold
        if threshold is not None and bucket(HOLDOUT_PREFIX, identifier) > threshold:
            return None
        variant = holdout.variant
        if holdout.variant_from_hash:
            variant = self._variant_for(identifier)
        return self._result(True, variant, HOLDOUT_CONDITION_VALUE, None)
