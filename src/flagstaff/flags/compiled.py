"""Compiled flag definitions and their evaluation for one request (the hot path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from flagstaff.flags.context import Context, EvaluationError, Matcher
from flagstaff.flags.hashing import (
    HOLDOUT_PREFIX,
    SCALE,
    VARIANT_SALT,
    bucket,
    first_64_bits,
    sha1,
)
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
    FlagResult,
    describe,
)

# Rank of the reasons a non-matching flag can report; the highest seen wins, and a later
# condition with an equal rank takes over the index (as on the PostHog server).
_NO_GROUP_TYPE_RANK = 1
_NO_MATCH_RANK = 2
_OUT_OF_ROLLOUT_RANK = 3
_RANKED_CODES = {
    _NO_GROUP_TYPE_RANK: NO_GROUP_TYPE,
    _NO_MATCH_RANK: NO_CONDITION_MATCH,
    _OUT_OF_ROLLOUT_RANK: OUT_OF_ROLLOUT_BOUND,
}
_RANKED_DESCRIPTIONS = {rank: describe(code, None) for rank, code in _RANKED_CODES.items()}


class Condition:
    __slots__ = (
        "group_name",
        "grouped",
        "index",
        "match_description",
        "matchers",
        "threshold",
        "variant",
    )

    def __init__(
        self,
        index: int,
        grouped: bool,
        group_name: str | None,
        matchers: tuple[Matcher, ...],
        threshold: float | None,
        variant: str | None,
    ) -> None:
        self.index = index
        self.grouped = grouped
        self.group_name = group_name
        self.matchers = matchers
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

    __slots__ = ("condition", "property_key", "trigger_keys")

    def __init__(
        self,
        property_key: str | None,
        condition: Condition | None,
        trigger_keys: tuple[str, ...],
    ) -> None:
        self.property_key = property_key
        self.condition = condition
        self.trigger_keys = trigger_keys


class CompiledFlag:
    __slots__ = (
        "active",
        "bucket_by_device",
        "conditions",
        "contexts",
        "dependencies",
        "description",
        "enrollment",
        "error",
        "flag_group_name",
        "flag_grouped",
        "holdout",
        "id",
        "index",
        "key",
        "missing_dependency",
        "payloads",
        "prefix",
        "records_value",
        "run",
        "runtime",
        "shared_results",
        "special",
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
        self.missing_dependency = False
        self.records_value = False
        self.error: str | None = None
        self.special = True
        self.shared_results: dict[tuple[Any, ...], FlagResult] = {}
        self.run: Callable[[Context], FlagResult] = self.evaluate

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

    def failed_result(self, message: str) -> FlagResult:
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

    def finish_linking(self) -> None:
        """Choose the fast path when nothing but the conditions needs evaluating."""
        self.special = bool(
            self.error is not None
            or self.missing_dependency
            or self.enrollment is not None
            or self.holdout is not None
            or self.records_value
        )
        simple = not self.special and not self.bucket_by_device
        if simple and not any(condition.grouped for condition in self.conditions):
            self.run = _person_flag_runner(self)
        else:
            self.run = self.evaluate

    def evaluate(self, ctx: Context) -> FlagResult:
        if self.special:
            return self._evaluate_special(ctx)
        try:
            return self._match_conditions(ctx)
        except EvaluationError as error:
            return self.failed_result(str(error))

    def _evaluate_special(self, ctx: Context) -> FlagResult:
        if self.error is not None:
            return self.failed_result(self.error)
        if self.missing_dependency:
            return self._result(False, None, MISSING_DEPENDENCY, None)
        try:
            result = None
            if self.enrollment is not None:
                result = self._enrollment(ctx, self.enrollment)
            if result is None and self.holdout is not None:
                result = self._holdout(ctx, self.holdout)
            if result is None:
                result = self._match_conditions(ctx)
        except EvaluationError as error:
            return self.failed_result(str(error))
        if self.records_value and result.enabled:
            ctx.values[self.index] = result.variant or True
        return result

    def _match_conditions(self, ctx: Context) -> FlagResult:
        rank = _NO_GROUP_TYPE_RANK
        rank_index: int | None = None
        skipped_groups = False
        person_id: bytes | None = None
        for condition in self.conditions:
            if condition.grouped:
                group_key = ctx.group_key(condition.group_name)
                if group_key is None:
                    skipped_groups = True
                    if rank <= _NO_GROUP_TYPE_RANK:
                        rank, rank_index = _NO_GROUP_TYPE_RANK, condition.index
                    continue
                identifier = group_key.encode("utf-8", "surrogatepass")
            else:
                if self.bucket_by_device and not ctx.device_id:
                    if rank <= _OUT_OF_ROLLOUT_RANK:
                        rank, rank_index = _OUT_OF_ROLLOUT_RANK, condition.index
                    continue
                if person_id is None:
                    if self.bucket_by_device or ctx.overrides:
                        person_id = self.person_identifier(ctx)
                    else:
                        person_id = ctx.distinct_id_bytes
                identifier = person_id

            matched = True
            for matcher in condition.matchers:
                if not matcher(ctx):
                    matched = False
                    break
            if not matched:
                if rank <= _NO_MATCH_RANK:
                    rank, rank_index = _NO_MATCH_RANK, condition.index
                continue
            threshold = condition.threshold
            if threshold is not None:
                if identifier:
                    digest = sha1(self.prefix + identifier).digest()
                    hashed = (first_64_bits(digest)[0] >> 4) / SCALE
                else:
                    hashed = 0.0
                if hashed > threshold:
                    if rank <= _OUT_OF_ROLLOUT_RANK:
                        rank, rank_index = _OUT_OF_ROLLOUT_RANK, condition.index
                    continue
            variant = condition.variant
            if variant is None and self.variants:
                variant = self._variant_for(identifier)
            return FlagResult(
                key=self.key,
                enabled=True,
                variant=variant,
                reason_code=CONDITION_MATCH,
                condition_index=condition.index,
                reason_description=condition.match_description,
                payload=self.true_payload if variant is None else self.payloads.get(variant),
                id=self.id,
                version=self.version,
                description=self.description,
            )

        if rank == _NO_MATCH_RANK and skipped_groups:
            return self._result(
                False, None, NO_CONDITION_MATCH, rank_index, GROUPS_NOT_EVALUATED_DESCRIPTION
            )
        code = _RANKED_CODES[rank]
        return FlagResult(
            key=self.key,
            enabled=False,
            variant=None,
            reason_code=code,
            condition_index=rank_index,
            reason_description=_RANKED_DESCRIPTIONS[rank],
            payload=None,
            id=self.id,
            version=self.version,
            description=self.description,
        )

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
        enabled = all(matcher(ctx) for matcher in condition.matchers)
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


def _person_flag_runner(flag: CompiledFlag) -> Callable[[Context], FlagResult]:
    """``flag.evaluate`` specialised, with everything bound to locals, for the common flag:
    person conditions only, no holdout, enrollment, dependants or device bucketing."""
    key, prefix, variants = flag.key, flag.prefix, flag.variants
    payloads, true_payload = flag.payloads, flag.true_payload
    flag_id, version, description = flag.id, flag.version, flag.description
    conditions = tuple(
        (c.index, c.matchers, c.threshold, c.variant, c.match_description) for c in flag.conditions
    )
    variant_for = flag._variant_for
    # A flag has few distinct outcomes: each is built once and shared by every request, so
    # callers must treat results as read-only (msgspec.structs.replace to change one).
    matched: dict[tuple[int, str | None], FlagResult] = {}
    missed: dict[tuple[int, int | None], FlagResult] = {}

    def run(ctx: Context) -> FlagResult:
        identifier = ctx.distinct_id_bytes
        if ctx.overrides:
            override = ctx.overrides.get(key)
            if override is not None:
                identifier = override.encode("utf-8", "surrogatepass")
        rank = _NO_GROUP_TYPE_RANK
        rank_index = None
        try:
            for index, matchers, threshold, variant, match_description in conditions:
                for matcher in matchers:
                    if not matcher(ctx):
                        break
                else:
                    if threshold is not None:
                        if identifier:
                            digest = sha1(prefix + identifier).digest()
                            hashed = (first_64_bits(digest)[0] >> 4) / SCALE
                        else:
                            hashed = 0.0
                        if hashed > threshold:
                            if rank <= _OUT_OF_ROLLOUT_RANK:
                                rank, rank_index = _OUT_OF_ROLLOUT_RANK, index
                            continue
                    if variant is None and variants:
                        variant = variant_for(identifier)
                    shared = matched.get((index, variant))
                    if shared is None:
                        shared = matched[(index, variant)] = FlagResult(
                            key=key,
                            enabled=True,
                            variant=variant,
                            reason_code=CONDITION_MATCH,
                            condition_index=index,
                            reason_description=match_description,
                            payload=true_payload if variant is None else payloads.get(variant),
                            id=flag_id,
                            version=version,
                            description=description,
                        )
                    return shared
                if rank <= _NO_MATCH_RANK:
                    rank, rank_index = _NO_MATCH_RANK, index
        except EvaluationError as error:
            return flag.failed_result(str(error))
        shared = missed.get((rank, rank_index))
        if shared is None:
            shared = missed[(rank, rank_index)] = FlagResult(
                key=key,
                enabled=False,
                variant=None,
                reason_code=_RANKED_CODES[rank],
                condition_index=rank_index,
                reason_description=_RANKED_DESCRIPTIONS[rank],
                payload=None,
                id=flag_id,
                version=version,
                description=description,
            )
        return shared

    return run
