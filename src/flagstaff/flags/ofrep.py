"""PostHog's flag results as OpenFeature Remote Evaluation Protocol (OFREP) answers. Pure.

OFREP (open-feature/protocol, ``service/openapi.yaml``) asks for one flag
(``POST /ofrep/v1/evaluate/flags/{key}``) or all of them (``POST /ofrep/v1/evaluate/flags``)
with an evaluation context: ``{"context": {"targetingKey": ..., <attributes>}}``.

The mapping (docs/compat-notes.md, "OpenFeature (OFREP)"):

- ``targetingKey`` is the distinct id; a ``groups`` attribute (``{"company": "acme"}``) gives
  the groups; every other attribute is a person property (overlaid on the stored ones, as
  ``person_properties`` of ``/flags``).
- ``value`` is what ``/flags`` answers in ``featureFlags``: the variant key of a matched
  multivariate flag, else the enabled state (``true``/``false``). ``variant`` is that value as
  text (``"true"``, ``"false"``, the variant key). The matched payload (JSON text) is
  ``metadata.payload``.
- ``reason``: ``DISABLED`` for an inactive flag; ``SPLIT`` when hashing decided the answer (a
  rollout below 100%, a variant split, a holdout, or a person outside the rollout of a
  condition whose properties matched); ``TARGETING_MATCH`` for any other match; ``DEFAULT``
  when no condition matched.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flagstaff.flags.compiled_flag import CompiledFlag
from flagstaff.flags.engine import CompiledFlags
from flagstaff.flags.model import (
    CONDITION_MATCH,
    HOLDOUT_CONDITION_VALUE,
    OUT_OF_ROLLOUT_BOUND,
    SUPER_CONDITION_VALUE,
    FlagResult,
)

TARGETING_MATCH = "TARGETING_MATCH"
SPLIT = "SPLIT"
DEFAULT = "DEFAULT"
DISABLED = "DISABLED"

PARSE_ERROR = "PARSE_ERROR"
TARGETING_KEY_MISSING = "TARGETING_KEY_MISSING"
INVALID_CONTEXT = "INVALID_CONTEXT"
FLAG_NOT_FOUND = "FLAG_NOT_FOUND"
GENERAL = "GENERAL"

TARGETING_KEY = "targetingKey"
GROUPS_ATTRIBUTE = "groups"
PAYLOAD_METADATA = "payload"
MAX_TARGETING_KEY_LENGTH = 200
"""As ``/flags`` cuts a distinct id."""


class ContextError(Exception):
    """A request OFREP refuses with 400: ``code`` is one of its error codes."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class OfrepContext(msgspec.Struct, frozen=True):
    """An evaluation context in PostHog's terms."""

    distinct_id: str
    person_properties: dict[str, Any]
    groups: dict[str, Any]


def parse_context(context: dict[str, Any] | None) -> OfrepContext:
    """The evaluation context of a request's ``context`` (the body decoded as
    :class:`flagstaff.http.ofrep_schemas.OfrepEvaluationRequest`); :class:`ContextError` when
    it has no targeting key (``TARGETING_KEY_MISSING``) or a malformed one or ``groups``
    (``INVALID_CONTEXT``)."""
    if context is None:
        raise ContextError(TARGETING_KEY_MISSING, "the request has no context.targetingKey")
    targeting_key = context.get(TARGETING_KEY)
    if targeting_key is None or targeting_key == "":
        raise ContextError(TARGETING_KEY_MISSING, "context.targetingKey is required")
    if not isinstance(targeting_key, str):
        raise ContextError(INVALID_CONTEXT, "context.targetingKey must be a string")
    groups = context.get(GROUPS_ATTRIBUTE)
    if groups is None:
        groups = {}
    elif not isinstance(groups, dict):
        raise ContextError(
            INVALID_CONTEXT, 'context.groups must be an object: {"<group type>": "<key>"}'
        )
    properties = {k: v for k, v in context.items() if k != TARGETING_KEY and k != GROUPS_ATTRIBUTE}
    return OfrepContext(targeting_key[:MAX_TARGETING_KEY_LENGTH], properties, groups)


def _hashed(result: FlagResult, flag: CompiledFlag | None) -> bool:
    """Whether the bucket of the distinct id (or group key) decided this result."""
    code = result.reason_code
    if code in (HOLDOUT_CONDITION_VALUE, OUT_OF_ROLLOUT_BOUND):
        return True
    if flag is None:
        return False
    if code == SUPER_CONDITION_VALUE:
        enrollment = flag.enrollment
        condition = enrollment.condition if enrollment is not None else None
        return condition is not None and condition.threshold is not None
    if code != CONDITION_MATCH or result.condition_index is None:
        return False
    if result.condition_index >= len(flag.conditions):
        return False
    condition = flag.conditions[result.condition_index]
    if condition.threshold is not None:
        return True
    if result.variant is None or condition.variant is not None:
        return False
    previous = 0.0
    shares = 0
    for _, upper in flag.variants:
        shares += upper > previous
        previous = upper
    return shares > 1


def reason(result: FlagResult, flag: CompiledFlag | None) -> str:
    """The OpenFeature reason of a (not failed) result of ``flag``."""
    if _hashed(result, flag):
        return SPLIT
    return TARGETING_MATCH if result.enabled else DEFAULT


def value_of(result: FlagResult) -> bool | str:
    """The value ``/flags`` answers in ``featureFlags``."""
    if not result.enabled:
        return False
    return result.variant or True


def _variant_text(value: bool | str) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value


def success(result: FlagResult, flag: CompiledFlag | None) -> dict[str, Any]:
    """An ``evaluationSuccess`` for a computed result."""
    value = value_of(result)
    out: dict[str, Any] = {
        "key": result.key,
        "value": value,
        "reason": reason(result, flag),
        "variant": _variant_text(value),
    }
    if result.payload is not None and result.enabled:
        out["metadata"] = {PAYLOAD_METADATA: result.payload}
    return out


def disabled(key: str) -> dict[str, Any]:
    """The ``evaluationSuccess`` of an inactive flag: off, ``DISABLED``."""
    return {"key": key, "value": False, "reason": DISABLED, "variant": "false"}


def failure(key: str | None, code: str, detail: str) -> dict[str, Any]:
    """An ``evaluationFailure`` (``key`` None: a bulk or general failure)."""
    out: dict[str, Any] = {"key": key} if key is not None else {}
    out["errorCode"] = code
    out["errorDetails"] = detail
    return out


FAILED_DETAIL = "the flag could not be evaluated (its stored data or a condition failed)"


def evaluation(result: FlagResult, compiled: CompiledFlags) -> dict[str, Any]:
    """A result as an ``evaluationSuccess``, or as an ``evaluationFailure`` (``GENERAL``)
    when it could not be computed."""
    if result.failed:
        return failure(result.key, GENERAL, FAILED_DETAIL)
    return success(result, compiled.flag(result.key))
