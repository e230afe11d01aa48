"""Early access features in PostHog's shapes, and the enrollment condition on their flag.

A feature is tied to one boolean, person-based feature flag. Without ``feature_flag_id`` a
flag is created, keyed by the slug of the feature's name, named "Feature Flag for Feature
<name>", rolled out to nobody (one condition at 0%). While the feature is in a release stage
(concept, alpha, beta, general-availability) the flag carries the enrollment ``super_groups``
condition: person property ``$feature_enrollment/<flag key>`` exactly ``["true"]``, which
posthog-js sets with ``updateEarlyAccessFeatureEnrollment`` (opting in turns the flag on for
that person, opting out off). Leaving the release stages (draft, archived) or deleting the
feature clears ``super_groups``; the flag itself is kept.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args
from urllib.parse import urlparse

import msgspec

from flagstaff.common.invalid import DefinitionInvalid, Errors
from flagstaff.flags.records import FeatureFlag

Stage = Literal["draft", "concept", "alpha", "beta", "general-availability", "archived"]
STAGES: tuple[str, ...] = get_args(Stage)
RELEASE_STAGES = frozenset({"concept", "alpha", "beta", "general-availability"})
DEFAULT_PUBLIC_STAGES = ("beta",)
ENROLLMENT_PREFIX = "$feature_enrollment"
MAX_NAME_LENGTH = 200
MAX_URL_LENGTH = 800
WRITABLE_FIELDS = ("name", "description", "stage", "documentation_url", "payload")


class EarlyAccessFeature(msgspec.Struct, kw_only=True):
    id: str
    name: str
    stage: str
    description: str = ""
    documentation_url: str = ""
    feature_flag_id: int | None = None
    payload: Any = {}
    created_at: datetime | None = None


class EarlyAccessInvalid(DefinitionInvalid):
    """An early access feature that cannot be saved."""


@dataclass(frozen=True)
class FlagFacts:
    """What validation needs of the flag named by ``feature_flag_id``."""

    id: int
    key: str
    variant_count: int = 0
    aggregation_group_type_index: int | None = None
    linked_feature_id: str | None = None


class FlagChange(msgspec.Struct, kw_only=True):
    """``create`` a flag (``flag`` is the whole body; store its id as the feature's
    ``feature_flag_id``) or ``update`` flag ``flag_id`` with the fields in ``flag``."""

    action: str
    flag_id: int | None = None
    flag: dict[str, Any]


def slugify(value: str) -> str:
    """Django's slugify: ASCII, lower case, runs of spaces and hyphens become one hyphen."""
    text = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text.lower())
    return re.sub(r"[-\s]+", "-", text).strip("-_")


def enrollment_property(flag_key: str) -> str:
    return f"{ENROLLMENT_PREFIX}/{flag_key}"


def enrollment_super_groups(flag_key: str) -> list[dict[str, Any]]:
    return [
        {
            "properties": [
                {
                    "key": enrollment_property(flag_key),
                    "type": "person",
                    "operator": "exact",
                    "value": ["true"],
                }
            ],
            "rollout_percentage": 100,
        }
    ]


def _check_url(value: str | None, errors: Errors) -> None:
    if not value:
        return
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        errors.append(("documentation_url", "Enter a valid URL."))
    elif len(value) > MAX_URL_LENGTH:
        errors.append(
            (
                "documentation_url",
                f"Ensure this field has no more than {MAX_URL_LENGTH} characters.",
            )
        )


def flag_facts(
    flag_id: int, key: str, filters: Mapping[str, Any], linked_feature_id: str | None = None
) -> FlagFacts:
    """What linking a stored flag (its id, key and ``filters``) to a feature is checked
    against; the fields, so that a flag read as a record and one of the definitions' JSON
    (the console's list) are judged alike without converting either."""
    return FlagFacts(
        id=flag_id,
        key=key,
        variant_count=len((filters.get("multivariate") or {}).get("variants") or []),
        aggregation_group_type_index=filters.get("aggregation_group_type_index"),
        linked_feature_id=linked_feature_id,
    )


def link_problem(flag: FlagFacts) -> str | None:
    """Why a feature cannot take this flag (PostHog's words), None when it can: a feature's
    flag is boolean, person-based and the feature's alone."""
    if flag.linked_feature_id is not None:
        return f"Linked feature flag {flag.key} already has a feature attached to it."
    if flag.aggregation_group_type_index is not None:
        return "Group-based feature flags are not supported for Early Access Features."
    if flag.variant_count > 0:
        return "Multivariate feature flags are not supported for Early Access Features."
    return None


def feature_from_input(
    body: Mapping[str, Any],
    current: EarlyAccessFeature | None,
    *,
    now: datetime,
    flag: FlagFacts | None = None,
    new_id: str | None = None,
) -> EarlyAccessFeature:
    """The feature a create (``current`` None) or PATCH body asks for, validated.

    ``body`` holds the fields the request set, each of its type already (the application's
    ``EarlyAccessFeatureInput`` decodes them). ``feature_flag_id`` is read on create only
    (PostHog's rule); ``flag`` is the flag it names, looked up by the caller (None when absent
    or not found).
    """
    errors: Errors = []
    if current is None:
        for field in ("name", "stage"):
            if body.get(field) in (None, ""):
                errors.append((field, "This field is required."))
    name = body.get("name")
    if name is not None and not (current is None and name == ""):
        if not name.strip():
            errors.append(("name", "Must be a non-empty string."))
        elif len(name) > MAX_NAME_LENGTH:
            errors.append(
                ("name", f"Ensure this field has no more than {MAX_NAME_LENGTH} characters.")
            )
    _check_url(body.get("documentation_url"), errors)
    flag_id = body.get("feature_flag_id") if current is None else None
    if flag_id is not None:
        problem = (
            "Feature Flag with this ID does not exist"
            if flag is None or flag.id != flag_id
            else link_problem(flag)
        )
        if problem is not None:
            errors.append(("feature_flag_id", problem))
    elif current is None and name and name.strip() and not slugify(name):
        errors.append(("name", "The name must contain a letter or digit to derive a flag key."))
    if errors:
        raise EarlyAccessInvalid(errors)
    changes = {k: body[k] for k in WRITABLE_FIELDS if k in body}
    for text in ("description", "documentation_url"):
        if text in changes and changes[text] is None:
            changes[text] = ""
    if "payload" in changes and changes["payload"] is None:
        changes["payload"] = {}
    if current is not None:
        return msgspec.structs.replace(current, **changes)
    return EarlyAccessFeature(
        id=new_id or str(uuid.uuid4()),
        feature_flag_id=flag_id,
        created_at=now,
        **changes,
    )


def plan_create(
    feature: EarlyAccessFeature, linked_flag: FeatureFlag | None = None
) -> list[FlagChange]:
    """Creating a feature: a new flag when none is linked, else the linked flag gets the
    enrollment condition when the stage is a release stage."""
    release = feature.stage in RELEASE_STAGES
    if linked_flag is None:
        key = slugify(feature.name)
        filters: dict[str, Any] = {
            "groups": [{"properties": [], "rollout_percentage": 0, "variant": None}]
        }
        if release:
            filters["super_groups"] = enrollment_super_groups(key)
        return [
            FlagChange(
                action="create",
                flag={
                    "key": key,
                    "name": f"Feature Flag for Feature {feature.name}",
                    "filters": filters,
                    "active": True,
                },
            )
        ]
    if not release:
        return []
    filters = {**linked_flag.filters, "super_groups": enrollment_super_groups(linked_flag.key)}
    return [FlagChange(action="update", flag_id=linked_flag.id, flag={"filters": filters})]


def plan_update(
    before: EarlyAccessFeature, after: EarlyAccessFeature, flag: FeatureFlag | None
) -> list[FlagChange]:
    """A stage change into the release stages adds the enrollment condition; out of them
    clears it."""
    if flag is None or before.stage == after.stage:
        return []
    if before.stage not in RELEASE_STAGES and after.stage in RELEASE_STAGES:
        groups: list[dict[str, Any]] | None = enrollment_super_groups(flag.key)
    elif after.stage not in RELEASE_STAGES:
        groups = None
    else:
        return []
    filters = {**flag.filters, "super_groups": groups}
    return [FlagChange(action="update", flag_id=flag.id, flag={"filters": filters})]


def plan_delete(flag: FeatureFlag | None) -> list[FlagChange]:
    """Deleting a feature clears the enrollment condition of its flag and keeps the flag."""
    if flag is None:
        return []
    filters = {**flag.filters, "super_groups": None}
    return [FlagChange(action="update", flag_id=flag.id, flag={"filters": filters})]


def feature_json(feature: EarlyAccessFeature, flag: dict[str, Any] | None) -> dict[str, Any]:
    """The management API's shape (``feature_flag`` is the minimal flag the store gives)."""
    return {
        "id": feature.id,
        "feature_flag": flag,
        "name": feature.name,
        "description": feature.description,
        "stage": feature.stage,
        "documentation_url": feature.documentation_url,
        "payload": feature.payload,
        "created_at": feature.created_at,
    }


def parse_stages(values: list[str]) -> tuple[str, ...]:
    """The ``stage`` query values of the public list (repeated or comma-separated); beta when
    none is given, as PostHog answers."""
    stages = tuple(s for v in values for s in v.split(",") if s)
    return stages or DEFAULT_PUBLIC_STAGES
