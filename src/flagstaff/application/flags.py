"""Flags: their bodies as PostHog writes them (:class:`FeatureFlagInput`, shaped and checked
once: the API, the console, ``flags import``, surveys, experiments and scheduled changes all
go through :func:`flag_from`), the write use cases (under the approval policy, held for
approval), rollback, the activity log, scheduled changes, and ``explain``: how one flag
evaluates for one person, read as /flags reads it.

``explain`` reads the stored person (by distinct id), the stored groups named and the stored
experience-continuity overrides as /flags does, and overlays them the same way (stored < the
given person properties); GeoIP is not applied (there is no client address). Nothing is
written. The explanation itself is pure: ``flags/explain.py``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal, Protocol

import msgspec

from flagstaff.activity import scheduled
from flagstaff.activity.records import Activity, ChangeSource
from flagstaff.activity.rollback import (
    FLAG_WRITABLE_FIELDS,
    FlagVersion,
    RollbackError,
    plan_rollback,
)
from flagstaff.activity.scheduled import Operation, ScheduledChange
from flagstaff.application.approvals import (
    Held,
    HoldStore,
    Unchanged,
    hold_flag_write,
    hold_schedule,
)
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, existing, invalid_input
from flagstaff.application.inputs import UNSET, UnsetType, decode, given
from flagstaff.application.wording import decode_worded
from flagstaff.common import clock
from flagstaff.common.clock import iso_to_ms, ms_to_iso
from flagstaff.common.errors import Conflict, NotFound
from flagstaff.common.invalid import DefinitionInvalid
from flagstaff.flags import EvalRequest, validate_flag
from flagstaff.flags.explain import Explanation, explain
from flagstaff.flags.records import FeatureFlag, FlagDefinition, flag_json
from flagstaff.flags.request import group_keys, group_properties_for, person_properties_for
from flagstaff.ops import logs
from flagstaff.store.records import Definitions, FlagContext, Page

# the flag body ------------------------------------------------------------------------------


class FeatureFlagInput(msgspec.Struct):
    """A flag to create (``key`` required), the fields to change (PATCH), or the whole flag
    (PUT: the fields left out take their defaults). Unknown and read-only fields (``id``,
    ``created_at``, ``team_id``... as found in a PostHog export) are ignored. ``filters`` is
    PostHog's structure (condition sets, variants, payloads), checked by
    ``flags/validation.py``."""

    key: str | UnsetType = UNSET
    name: str | UnsetType | None = UNSET
    filters: dict[str, Any] | UnsetType | None = UNSET
    active: bool | UnsetType = UNSET
    deleted: bool | UnsetType = UNSET
    ensure_experience_continuity: bool | UnsetType = UNSET
    evaluation_runtime: Literal["all", "client", "server"] | UnsetType | None = UNSET
    evaluation_contexts: list[str] | UnsetType | None = UNSET
    bucketing_identifier: Literal["distinct_id", "device_id"] | UnsetType | None = UNSET
    tags: list[str] | UnsetType = UNSET
    evaluation_tags: list[str] | UnsetType | None = UNSET
    """PostHog's older name of ``evaluation_contexts`` (read when that is left out)."""
    rollout_percentage: int | float | UnsetType | None = UNSET
    """Legacy: on create, without ``filters``, one condition set of everyone at this rollout."""


_FLAG_DEFAULTS: dict[str, Any] = {
    "name": "",
    "active": True,
    "deleted": False,
    "ensure_experience_continuity": False,
    "evaluation_runtime": "all",
    "evaluation_contexts": [],
    "bucketing_identifier": "distinct_id",
    "tags": [],
}


def flag_from(data: FeatureFlagInput, current: FlagDefinition | None = None) -> FlagDefinition:
    """The full flag a create (``current`` None) or PATCH body asks for, validated."""
    body = given(data)
    base = dict(_FLAG_DEFAULTS) if current is None else flag_json(current)
    changes = {k: body[k] for k in FLAG_WRITABLE_FIELDS if k in body}
    if "evaluation_contexts" not in changes and "evaluation_tags" in body:
        changes["evaluation_contexts"] = body["evaluation_tags"]
    if "filters" not in changes and "rollout_percentage" in body and current is None:
        changes["filters"] = {
            "groups": [{"properties": [], "rollout_percentage": body["rollout_percentage"]}]
        }
    flag = {**base, **changes}
    if current is None:
        flag.setdefault("filters", {"groups": []})
        if "key" not in flag:
            raise ApiError(400, "required", "key is required", "key")
    if flag.get("evaluation_contexts") is None:
        flag["evaluation_contexts"] = []
    if flag.get("name") is None:
        flag["name"] = ""
    errors = validate_flag(flag)
    if errors:
        raise invalid_input(DefinitionInvalid(errors))
    return msgspec.convert(flag, FlagDefinition)


def flag_from_input(body: Any, current: FlagDefinition | None = None) -> FlagDefinition:
    """:func:`flag_from` of a decoded JSON body (an import, a survey's or an experiment's flag,
    a scheduled change): refused as the API refuses it."""
    return flag_from(decode(FeatureFlagInput, body), current)


class RollbackInput(msgspec.Struct):
    version: int
    """The earlier version of the flag to restore."""


def rollback_input(body: Any) -> RollbackInput:
    return decode_worded(
        RollbackInput, body, {"version": ("required", "version (an integer) is required")}
    )


# writing flags ------------------------------------------------------------------------------


class FlagWrites(Protocol):
    """Writing a flag (the API's writes, an import)."""

    async def create_flag(
        self, project_id: int, flag: FlagDefinition, source: ChangeSource | None = None,
        created_at: str | None = None,
    ) -> FeatureFlag: ...  # fmt: skip

    async def update_flag(
        self, project_id: int, flag_id: int, flag: FlagDefinition, version: int | None,
        source: ChangeSource | None = None,
    ) -> FeatureFlag: ...  # fmt: skip


class VersionReads(Protocol):
    """A flag's stored versions (what rollback restores)."""

    async def flag_versions(self, project_id: int, flag_id: int) -> list[FlagVersion]: ...


class FlagStore(FlagWrites, VersionReads, HoldStore, Protocol):
    """What the flag writes use: the flags, their versions, and what the approval hold reads
    (the policy) and writes (a change request)."""


FlagOutcome = FeatureFlag | Held | Unchanged
"""A write's outcome: the flag as stored, or, under an approval policy, the change request it
became (:class:`Held`) or the flag as it was (:class:`Unchanged`)."""


class FlagLookup(Protocol):
    """Reading one flag."""

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None: ...


class FlagReads(FlagLookup, Protocol):
    async def list_flags(self, project_id: int, limit: int, offset: int) -> Page: ...


async def find_flag(store: FlagLookup, project_id: int, flag_id: int) -> FeatureFlag | None:
    """The project's flag ``flag_id`` as stored (a deleted one too), None when it has none."""
    return await store.get_flag(project_id, flag_id)


async def existing_flag(caller: Caller[FlagReads], flag_id: int) -> FeatureFlag:
    """The project's flag ``flag_id``; 404 when it has none."""
    return existing(await find_flag(caller.store, caller.project_id, flag_id), "feature flag")


async def flag_versions(store: VersionReads, project_id: int, flag_id: int) -> list[FlagVersion]:
    """The flag's stored versions (the console's history page; rollback reads them too)."""
    return await store.flag_versions(project_id, flag_id)


class DefinitionReads(Protocol):
    """The project's definitions as /flags compiles them (flags, cohorts and group types in
    PostHog's JSON), and the version every flag, cohort and group type write moves."""

    async def definitions_version(self, project_id: int) -> int: ...

    async def definitions(self, project_id: int) -> Definitions: ...


async def definitions_version(store: DefinitionReads, project_id: int) -> int:
    """The project's definitions version (moved by every flag, cohort and group type write)."""
    return await store.definitions_version(project_id)


async def project_definitions(store: DefinitionReads, project_id: int) -> Definitions:
    """The project's flags, cohorts and group types as /flags compiles them."""
    return await store.definitions(project_id)


async def list_flags(caller: Caller[FlagReads], limit: int, offset: int) -> Page:
    """The project's live flags, newest first."""
    return await caller.store.list_flags(caller.project_id, limit, offset)


async def create_flag(caller: Caller[FlagStore], data: FeatureFlagInput) -> FeatureFlag:
    return await caller.store.create_flag(caller.project_id, flag_from(data), caller.source)


async def _write(
    caller: Caller[FlagStore],
    current: FeatureFlag,
    flag: FlagDefinition,
    source: ChangeSource | None = None,
) -> FlagOutcome:
    held = await hold_flag_write(caller, current, flag)
    if held is not None:
        return held
    return await caller.store.update_flag(
        caller.project_id, current.id, flag, current.version, source or caller.source
    )


async def update_flag(
    caller: Caller[FlagStore], current: FeatureFlag, data: FeatureFlagInput
) -> FlagOutcome:
    """A PATCH: the fields given change, the others stay."""
    return await _write(caller, current, flag_from(data, current))


async def replace_flag(
    caller: Caller[FlagStore], current: FeatureFlag, data: FeatureFlagInput
) -> FlagOutcome:
    """A PUT, a full update as in PostHog's API: fields left out take their defaults."""
    return await _write(caller, current, flag_from(data))


async def delete_flag(caller: Caller[FlagStore], current: FeatureFlag) -> FlagOutcome | None:
    """Mark the flag deleted (None: it was already)."""
    if current.deleted:
        return None
    return await _write(caller, current, msgspec.structs.replace(current, deleted=True))


async def rollback_flag(
    caller: Caller[FlagStore], current: FeatureFlag, data: RollbackInput
) -> FlagOutcome:
    """Restore an earlier version of the flag: an ordinary update (same validation, same
    optimistic version check) recorded as ``rolled_back``."""
    history = await flag_versions(caller.store, caller.project_id, current.id)
    try:
        plan = plan_rollback(current.id, history, flag_json(current), data.version)
    except RollbackError as exc:
        raise ApiError(400, "invalid_input", str(exc), exc.field) from None
    flag = flag_from_input(plan.body, current)
    source = ChangeSource(
        actor=caller.source.actor, trigger=plan.trigger, activity=Activity.ROLLED_BACK
    )
    return await _write(caller, current, flag, source)


# scheduled changes --------------------------------------------------------------------------


class ScheduledChangeInput(msgspec.Struct):
    record_id: int | str
    """The feature flag's id (a number, or its digits as a string)."""
    payload: dict[str, Any]
    """``{"operation": "update_status" | "add_release_condition" | "update_variants" |
    "update_rollout", "value": ...}``"""
    scheduled_at: str
    """ISO 8601, in the future."""
    model_name: Literal["FeatureFlag"] = "FeatureFlag"


_SCHEDULE_WORDING = {
    "record_id": ("required", "record_id (a feature flag id) is required"),
    "model_name": ("invalid_input", "model_name must be FeatureFlag"),
    "payload": ("invalid_input", "payload must be an object"),
    "scheduled_at": ("invalid_input", "scheduled_at must be a time"),
}


def scheduled_change_input(body: Any) -> ScheduledChangeInput:
    return decode_worded(ScheduledChangeInput, body, _SCHEDULE_WORDING)


class ScheduleReads(Protocol):
    """The project's scheduled changes."""

    async def list_scheduled_changes(
        self, project_id: int, flag_id: int | None
    ) -> list[ScheduledChange]: ...


class ScheduleStore(FlagStore, ScheduleReads, Protocol):
    """What scheduling reads and writes: the flag, and the scheduled changes."""

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None: ...

    async def create_scheduled_change(
        self, project_id: int, flag_id: int, operation: Operation, payload: dict[str, Any],
        run_at_ms: int, created_by: int | None, now_ms: int,
    ) -> ScheduledChange: ...  # fmt: skip

    async def delete_scheduled_change(self, project_id: int, change_id: int) -> bool: ...


def scheduled_json(change: ScheduledChange) -> dict[str, Any]:
    """A scheduled change in PostHog's shape."""
    return {
        "id": change.id,
        "record_id": str(change.flag_id),
        "model_name": scheduled.MODEL_NAME,
        "payload": change.payload,
        "scheduled_at": ms_to_iso(change.run_at_ms),
        "executed_at": ms_to_iso(change.executed_at_ms) if change.executed_at_ms else None,
        "failure_reason": change.failure,
        "created_at": ms_to_iso(change.created_at_ms),
        "created_by": {"id": change.created_by} if change.created_by is not None else None,
    }


async def scheduled_changes(
    store: ScheduleReads, project_id: int, flag_id: int | None
) -> list[ScheduledChange]:
    """The project's scheduled changes (of one flag unless None), soonest first."""
    return await store.list_scheduled_changes(project_id, flag_id)


async def list_scheduled_changes(
    caller: Caller[ScheduleStore], flag_id: int | None
) -> list[ScheduledChange]:
    """The project's scheduled changes (of one flag unless None), soonest first."""
    return await scheduled_changes(caller.store, caller.project_id, flag_id)


async def create_scheduled_change(
    caller: Caller[ScheduleStore], data: ScheduledChangeInput
) -> ScheduledChange | Held:
    """A change to a flag that runs when due (held for approval under the policy)."""
    record = data.record_id
    if isinstance(record, str):
        if not record.isdigit():
            raise ApiError(400, *_SCHEDULE_WORDING["record_id"], "record_id")
        record = int(record)
    flag = await caller.store.get_flag(caller.project_id, record)
    if flag is None or flag.deleted:
        raise ApiError(400, "invalid_input", "no such feature flag", "record_id")
    run_at = iso_to_ms(data.scheduled_at)
    try:
        operation = scheduled.check_schedule(data.payload, run_at, clock.now_ms())
    except scheduled.ScheduleError as exc:
        raise ApiError(400, "invalid_input", str(exc), exc.field) from None
    assert run_at is not None  # check_schedule refuses a missing time
    held = await hold_schedule(caller, flag, operation, data.payload, run_at)
    if held is not None:
        return held
    return await caller.store.create_scheduled_change(
        caller.project_id,
        flag.id,
        operation,
        data.payload,
        run_at,
        caller.principal.user_id,
        clock.now_ms(),
    )


async def delete_scheduled_change(caller: Caller[ScheduleStore], change_id: int) -> None:
    """Cancel a change that has not run."""
    if not await caller.store.delete_scheduled_change(caller.project_id, change_id):
        raise ApiError(404, "not_found", "no such pending scheduled change")


class DueChangeStore(Protocol):
    """What running a due change reads and writes: the flag."""

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None: ...

    async def update_flag(
        self, project_id: int, flag_id: int, flag: FlagDefinition, version: int | None,
        source: ChangeSource | None = None,
    ) -> FeatureFlag: ...  # fmt: skip


async def run_scheduled_change(store: DueChangeStore, change: ScheduledChange) -> str | None:
    """Carry out one claimed change as an ordinary update (the flag rules, the version check,
    the activity record with a ``scheduled_change`` trigger, not held: it was approved when
    scheduled); the reason it failed, or None."""
    current = await store.get_flag(change.project_id, change.flag_id)
    if current is None or current.deleted:
        return "the flag was deleted"
    try:
        flag = flag_from_input(scheduled.update_body(change, flag_json(current)), current)
        await store.update_flag(
            change.project_id,
            change.flag_id,
            flag,
            current.version,
            ChangeSource(trigger=scheduled.trigger_for(change)),
        )
    except scheduled.ScheduleError as exc:
        return str(exc)
    except ApiError as exc:
        return exc.detail
    except (Conflict, NotFound) as exc:
        return str(exc)
    return None


CLAIM_BATCH = 50
"""Due changes claimed by one poll."""


class DueChangesStore(DueChangeStore, Protocol):
    """What running the due changes needs: claiming them, and recording a failure."""

    async def claim_due_changes(self, now_ms: int, limit: int) -> list[ScheduledChange]: ...

    async def fail_scheduled_change(self, change_id: int, failure: str) -> None: ...


async def run_due_changes(
    store: DueChangesStore, now_ms: int, on_change: Callable[[], object] = lambda: None
) -> int:
    """Claim what is due (a change is claimed by exactly one worker or node) and apply each
    (:func:`run_scheduled_change`); a change that cannot apply keeps its failure for the API
    to show. How many were claimed. ``on_change`` follows each applied change (the node's
    change counter, so every worker serves it at once)."""
    claimed = await store.claim_due_changes(now_ms, CLAIM_BATCH)
    for change in claimed:
        failure = await run_scheduled_change(store, change)
        if failure is None:
            on_change()
        else:
            await store.fail_scheduled_change(change.id, failure)
            logs.log(logging.WARNING, "scheduled change failed", id=change.id, failure=failure)
    return len(claimed)


# explain ------------------------------------------------------------------------------------


class ExplainError(ValueError):
    """The flag to explain does not exist."""


class ExplainStore(Protocol):
    """What ``explain`` reads: the definitions and a person's flag context, as /flags does."""

    async def definitions(self, project_id: int) -> Definitions: ...

    async def flag_context(
        self, project_id: int, distinct_id: str, groups: dict[int, str], *,
        overrides: bool = False, static_cohorts: bool = False,
    ) -> FlagContext: ...  # fmt: skip


async def explain_from_store(
    store: ExplainStore,
    project_id: int,
    key: str,
    distinct_id: str,
    *,
    person_properties: dict[str, Any],
    groups: dict[str, Any],
    device_id: str | None = None,
) -> Explanation:
    definitions, request = await request_from_store(
        store, project_id, distinct_id, person_properties, groups, device_id
    )
    try:
        return explain(
            definitions.flags, definitions.cohorts, definitions.group_type_mapping, key, request
        )
    except KeyError:
        raise ExplainError(f"no flag with key {key!r} in project {project_id}") from None


async def request_from_store(
    store: ExplainStore,
    project_id: int,
    distinct_id: str,
    person_properties: dict[str, Any],
    groups: dict[str, Any],
    device_id: str | None = None,
    definitions: Definitions | None = None,
) -> tuple[Definitions, EvalRequest]:
    """The project's definitions (read unless given) and the evaluation request /flags would
    build for this person (stored properties overlaid with ``person_properties``)."""
    if definitions is None:
        definitions = await store.definitions(project_id)
    group_type_index = {name: int(index) for index, name in definitions.group_type_mapping.items()}
    keys = group_keys(groups)
    indexes = {
        group_type_index[name]: group_key
        for name, group_key in keys.items()
        if name in group_type_index
    }
    stored = await store.flag_context(
        project_id, distinct_id, indexes, overrides=True, static_cohorts=True
    )
    continuity = {
        flag.get("key")
        for flag in definitions.flags
        if isinstance(flag, dict) and flag.get("ensure_experience_continuity")
    }
    request = EvalRequest(
        distinct_id=distinct_id,
        person_properties=person_properties_for(stored.person_properties, {}, person_properties),
        groups=keys,
        group_properties=group_properties_for(
            groups, group_type_index, stored.group_properties, {}
        ),
        device_id=device_id,
        hash_key_overrides={k: v for k, v in stored.hash_key_overrides.items() if k in continuity},
        static_cohort_ids=stored.static_cohort_ids,
    )
    return definitions, request
