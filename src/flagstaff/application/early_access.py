"""Early access features: create, update (the stage moves the enrollment condition on their
flag), delete, and the stages the public list is asked for.

A save decodes the body once (:class:`EarlyAccessFeatureInput`, the request body the OpenAPI
document shows too), checks it with the flag it links (``surveys.early_access``), plans the
change to that flag, turns it into a whole flag as the flag API would
(:func:`flagstaff.application.flags.flag_from_input`), and hands both to the store, which
applies them in one transaction. Enrolment itself is the person's: posthog-js sets the
``$feature_enrollment/<flag key>`` property, which the flag's condition reads.

The use cases answer typed records (:class:`ShownFeature`, :class:`FeaturePage`); the adapters
render them with :func:`feature_json`, the one definition of the wire shape."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

from flagstaff.activity.records import ChangeSource
from flagstaff.application import flags as flag_rules
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, invalid_input
from flagstaff.application.inputs import UNSET, UnsetType, given
from flagstaff.application.surveys import (
    FlagStore,
    flags_shown,
    minimal_flag,
    record_id,
    stored_flag,
)
from flagstaff.flags.records import FeatureFlag
from flagstaff.store.records import Conflict, Enrolled, FlagWrite, Page
from flagstaff.surveys import early_access
from flagstaff.surveys.early_access import (
    EarlyAccessFeature,
    EarlyAccessInvalid,
    FlagChange,
    Stage,
)
from flagstaff.surveys.model import format_datetime

__all__ = [
    "EarlyAccessFeatureInput",
    "EarlyAccessStore",
    "EnrollmentReads",
    "FeaturePage",
    "FeatureReads",
    "ShownFeature",
    "create_feature",
    "delete_feature",
    "enrolled_persons",
    "enrollment_counts",
    "feature_flag",
    "feature_json",
    "feature_of",
    "features_page",
    "find_feature",
    "list_features",
    "public_stages",
    "shown_feature",
    "update_feature",
]


class EarlyAccessFeatureInput(msgspec.Struct, kw_only=True):
    """A feature to create, or the fields to change (PATCH: a field left out is kept).
    ``feature_flag_id`` links an existing boolean flag, on create only (without it a flag is
    made, keyed by the name's slug). Other fields are ignored."""

    name: str | UnsetType = UNSET
    description: str | UnsetType | None = UNSET
    stage: Stage | UnsetType = UNSET
    documentation_url: str | UnsetType | None = UNSET
    payload: Any = UNSET
    feature_flag_id: int | UnsetType | None = UNSET


class ShownFeature(msgspec.Struct, frozen=True):
    """A feature with its flag (minimal; None when it has none or it was deleted): what the
    management API answers of one feature."""

    feature: EarlyAccessFeature
    flag: FeatureFlag | None


class FeaturePage(msgspec.Struct, frozen=True):
    """A page of the project's features: how many in all, and the page's."""

    count: int
    results: list[ShownFeature]


class FeatureReads(Protocol):
    """The project's features, as they are."""

    async def list_early_access_features(
        self, project_id: int, limit: int, offset: int
    ) -> Page: ...

    async def get_early_access_feature(
        self, project_id: int, feature_id: str
    ) -> EarlyAccessFeature | None: ...


class EnrollmentReads(Protocol):
    """Who opted in to a feature (``person_enrollments``, kept by ingestion)."""

    async def enrolled_persons(self, project_id: int, flag_key: str, limit: int) -> Enrolled: ...

    async def enrollment_counts(self, project_id: int, flag_keys: list[str]) -> dict[str, int]: ...


class EarlyAccessStore(FlagStore, FeatureReads, Protocol):
    """What the early access use cases need of the store."""

    async def early_access_feature_of_flag(self, project_id: int, flag_id: int) -> str | None: ...

    async def save_early_access_feature(
        self,
        project_id: int,
        feature: EarlyAccessFeature,
        flags: list[FlagWrite],
        *,
        create: bool,
        source: ChangeSource | None = None,
    ) -> EarlyAccessFeature: ...

    async def delete_early_access_feature(
        self,
        project_id: int,
        feature_id: str,
        flags: list[FlagWrite],
        *,
        source: ChangeSource | None = None,
    ) -> None: ...


def _now() -> datetime:
    return datetime.now(UTC)


# reading -----------------------------------------------------------------------------------


async def feature_flag(
    store: FlagStore, project_id: int, feature: EarlyAccessFeature
) -> FeatureFlag | None:
    """The feature's flag as stored, None when it has none or it was deleted."""
    return await stored_flag(store, project_id, feature.feature_flag_id)


async def shown_feature(
    store: FlagStore, project_id: int, feature: EarlyAccessFeature
) -> ShownFeature:
    """The feature with its flag."""
    flags = await flags_shown(store, project_id, [feature.feature_flag_id])
    flag = flags.get(feature.feature_flag_id) if feature.feature_flag_id is not None else None
    return ShownFeature(feature, flag)


def feature_json(shown: ShownFeature) -> dict[str, Any]:
    """The feature in the management API's shape, with its flag."""
    flag = minimal_flag(shown.flag) if shown.flag is not None else None
    out = early_access.feature_json(shown.feature, flag)
    out["created_at"] = format_datetime(shown.feature.created_at)
    return out


async def find_feature(store: FeatureReads, project_id: int, feature_id: str) -> EarlyAccessFeature:
    """Feature ``feature_id`` of the project, or a 404."""
    what = "early access feature"
    feature = await store.get_early_access_feature(project_id, record_id(feature_id, what))
    if feature is None:
        raise ApiError(404, "not_found", f"no such {what}")
    return feature


async def features_page(store: FeatureReads, project_id: int, limit: int, offset: int) -> Page:
    """A page of the project's features (:class:`EarlyAccessFeature` records), newest first."""
    return await store.list_early_access_features(project_id, limit, offset)


async def enrolled_persons(
    store: EnrollmentReads, project_id: int, flag_key: str, limit: int
) -> Enrolled:
    """Persons enrolled through the feature's flag ``flag_key``: how many, and a distinct id
    of each of the newest ``limit``."""
    return await store.enrolled_persons(project_id, flag_key, limit)


async def enrollment_counts(
    store: EnrollmentReads, project_id: int, flag_keys: list[str]
) -> dict[str, int]:
    """Per flag key, how many persons are enrolled (0 for none)."""
    return await store.enrollment_counts(project_id, flag_keys)


async def feature_of(caller: Caller[EarlyAccessStore], feature_id: str) -> ShownFeature:
    """Feature ``feature_id`` with its flag, or a 404."""
    feature = await find_feature(caller.store, caller.project_id, feature_id)
    return await shown_feature(caller.store, caller.project_id, feature)


async def list_features(caller: Caller[EarlyAccessStore], limit: int, offset: int) -> FeaturePage:
    """A page of the project's features, newest first, with their flags."""
    page = await features_page(caller.store, caller.project_id, limit, offset)
    shown = [await shown_feature(caller.store, caller.project_id, f) for f in page.results]
    return FeaturePage(page.count, shown)


def public_stages(values: list[str]) -> tuple[str, ...]:
    """The stages the public list is asked for (``stage`` repeated or comma-separated; beta
    when none), each a stage, else a 400 naming ``stage``."""
    stages = early_access.parse_stages(values)
    unknown = [s for s in stages if s not in early_access.STAGES]
    if unknown:
        raise ApiError(
            400,
            "invalid_input",
            f"unknown stage {unknown[0]!r}; one of {', '.join(early_access.STAGES)}",
            "stage",
        )
    return stages


# saving ------------------------------------------------------------------------------------


def _flag_writes(changes: list[FlagChange], current: FeatureFlag | None) -> list[FlagWrite]:
    """Each planned change as a whole flag, checked as the flag API checks it."""
    writes = []
    for change in changes:
        if change.action == "create":
            flag = flag_rules.flag_from_input(change.flag)
            writes.append(FlagWrite(flag=flag, target="feature_flag_id"))
        else:
            assert change.flag_id is not None and current is not None
            flag = flag_rules.flag_from_input(change.flag, current)
            writes.append(FlagWrite(flag=flag, flag_id=change.flag_id, version=current.version))
    return writes


async def _save(
    caller: Caller[EarlyAccessStore],
    feature: EarlyAccessFeature,
    changes: list[FlagChange],
    flag: FeatureFlag | None,
    *,
    create: bool,
) -> ShownFeature:
    store, project_id = caller.store, caller.project_id
    writes = _flag_writes(changes, flag)
    try:
        saved = await store.save_early_access_feature(
            project_id, feature, writes, create=create, source=caller.source
        )
    except Conflict as exc:
        if exc.field == "key":
            raise ApiError(
                400,
                "invalid_input",
                f"A feature flag with the key of this name already exists ({exc.message}); "
                "link it with feature_flag_id or choose another name",
                "name",
            ) from None
        raise ApiError(400, "unique", exc.message, exc.field) from None
    return await shown_feature(store, project_id, saved)


async def create_feature(
    caller: Caller[EarlyAccessStore], inp: EarlyAccessFeatureInput
) -> ShownFeature:
    """A new feature with its flag (made, or the one ``feature_flag_id`` links, which gets
    the enrollment condition in a release stage); the feature saved, with its flag."""
    store, project_id = caller.store, caller.project_id
    fields = given(inp)
    flag = await stored_flag(store, project_id, fields.get("feature_flag_id"))
    facts = None
    if flag is not None:
        linked = await store.early_access_feature_of_flag(project_id, flag.id)
        facts = early_access.flag_facts(flag.id, flag.key, flag.filters, linked)
    try:
        feature = early_access.feature_from_input(fields, None, now=_now(), flag=facts)
    except EarlyAccessInvalid as exc:
        raise invalid_input(exc) from None
    changes = early_access.plan_create(feature, flag)
    return await _save(caller, feature, changes, flag, create=True)


async def update_feature(
    caller: Caller[EarlyAccessStore], feature_id: str, inp: EarlyAccessFeatureInput
) -> ShownFeature:
    """The fields the body sets; a stage into the release stages adds the enrollment
    condition to the flag, out of them clears it."""
    store, project_id = caller.store, caller.project_id
    before = await find_feature(store, project_id, feature_id)
    try:
        after = early_access.feature_from_input(given(inp), before, now=_now())
    except EarlyAccessInvalid as exc:
        raise invalid_input(exc) from None
    flag = await feature_flag(store, project_id, before)
    changes = early_access.plan_update(before, after, flag)
    return await _save(caller, after, changes, flag, create=False)


async def delete_feature(caller: Caller[EarlyAccessStore], feature_id: str) -> None:
    """The feature goes; its flag stays, without the enrollment condition."""
    store, project_id = caller.store, caller.project_id
    feature = await find_feature(store, project_id, feature_id)
    flag = await feature_flag(store, project_id, feature)
    writes = _flag_writes(early_access.plan_delete(flag), flag)
    await store.delete_early_access_feature(project_id, feature.id, writes, source=caller.source)
