"""Request and response shapes of the OFREP routes: the request body, which
:mod:`flagstaff.http.ofrep` decodes, and the answers, for the OpenAPI document (as
:mod:`flagstaff.http.schemas` for the rest); the protocol's own document is
open-feature/protocol ``service/openapi.yaml``."""

from __future__ import annotations

from typing import Any

import msgspec


class OfrepEvaluationRequest(msgspec.Struct):
    """``context.targetingKey`` is the distinct id; ``context.groups`` (``{"company":
    "acme"}``) the groups; every other attribute of ``context`` a person property. Without
    a context (or a null one) the answer is TARGETING_KEY_MISSING; the context's attributes
    are checked by :func:`flagstaff.flags.ofrep.parse_context`."""

    context: dict[str, Any] | None


class OfrepEvaluation(msgspec.Struct, omit_defaults=True):
    """One flag: ``value`` is ``/flags``' ``featureFlags`` value (the variant key, else the
    enabled state) and ``variant`` that value as text; ``reason`` is TARGETING_MATCH, SPLIT,
    DEFAULT or DISABLED; ``metadata.payload`` is the matched payload (JSON text)."""

    key: str
    value: bool | str
    reason: str
    variant: str
    metadata: dict[str, str] | None = None


class OfrepFailure(msgspec.Struct, omit_defaults=True):
    """A failure: ``errorCode`` is PARSE_ERROR, TARGETING_KEY_MISSING, INVALID_CONTEXT,
    FLAG_NOT_FOUND or GENERAL; ``key`` names the flag (single endpoint, or a bulk item)."""

    errorCode: str
    errorDetails: str
    key: str | None = None


class OfrepBulkItem(msgspec.Struct, omit_defaults=True):
    """An item of a bulk answer: an evaluation (``value``, ``reason``, ``variant``) or a
    failure (``errorCode``, ``errorDetails``)."""

    key: str
    value: bool | str | None = None
    reason: str | None = None
    variant: str | None = None
    metadata: dict[str, str] | None = None
    errorCode: str | None = None
    errorDetails: str | None = None


class OfrepBulkEvaluation(msgspec.Struct):
    flags: list[OfrepBulkItem]


class OfrepConfiguration(msgspec.Struct):
    """``capabilities``: ``cacheInvalidation.polling`` (``enabled``,
    ``minPollingIntervalMs``) and ``flagEvaluation.supportedTypes``."""

    name: str
    capabilities: dict[str, Any]
