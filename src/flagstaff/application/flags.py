"""Flags: their bodies as PostHog writes them, shaped and checked once (the API,
the console, ``flags import`` and scheduled changes all go through :func:`flag_from_input`),
and ``explain``: how one flag evaluates for one person, read as /flags reads it.

``explain`` reads the stored person (by distinct id), the stored groups named and the stored
experience-continuity overrides as /flags does, and overlays them the same way (stored < the
given person properties); GeoIP is not applied (there is no client address). Nothing is
written. The explanation itself is pure: ``flags/explain.py``."""

from __future__ import annotations

from typing import Any, Protocol

from flagstaff.activity.records import Activity, ChangeSource
from flagstaff.activity.rollback import FLAG_WRITABLE_FIELDS, RollbackError, plan_rollback
from flagstaff.activity.scheduled import Operation, ScheduledChange
from flagstaff.application.approvals import Held, Unchanged, hold_flag_write, hold_schedule
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, invalid_input
from flagstaff.common import clock
from flagstaff.common.invalid import DefinitionInvalid
from flagstaff.flags import EvalRequest, validate_flag
from flagstaff.flags.explain import Explanation, explain
from flagstaff.flags.request import group_keys, group_properties_for, person_properties_for
from flagstaff.store.base import Store
from flagstaff.store.records import Definitions, FlagContext

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


def _require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_input", "the request body must be a JSON object")
    return body


def flag_from_input(body: Any, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """The full flag a create (``current`` None) or PATCH body asks for, validated.

    Unknown and read-only fields (id, created_at, team_id... as found in a PostHog export) are
    ignored. ``evaluation_tags`` is accepted for ``evaluation_contexts``; a legacy top-level
    ``rollout_percentage`` without ``filters`` becomes one condition set.
    """
    body = _require_object(body)
    base = dict(_FLAG_DEFAULTS) if current is None else dict(current)
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
    if current is not None:
        flag["version"] = current.get("version")
    return flag


# writing flags ------------------------------------------------------------------------------


FlagWrite = dict[str, Any] | Held | Unchanged
"""A write's outcome: the flag as stored, or, under an approval policy, the change request it
became (:class:`Held`) or the flag as it was (:class:`Unchanged`)."""


async def create_flag(caller: Caller[Store], body: Any) -> dict[str, Any]:
    flag = flag_from_input(body)
    return await caller.store.create_flag(caller.project_id, flag, caller.source)


async def _write(
    caller: Caller[Store],
    current: dict[str, Any],
    flag: dict[str, Any],
    source: ChangeSource | None = None,
) -> FlagWrite:
    held = await hold_flag_write(caller, current, flag)
    if held is not None:
        return held
    return await caller.store.update_flag(
        caller.project_id, current["id"], flag, source or caller.source
    )


async def update_flag(caller: Caller[Store], current: dict[str, Any], body: Any) -> FlagWrite:
    """A PATCH: the fields given change, the others stay."""
    return await _write(caller, current, flag_from_input(body, current))


async def replace_flag(caller: Caller[Store], current: dict[str, Any], body: Any) -> FlagWrite:
    """A PUT, a full update as in PostHog's API: fields left out take their defaults."""
    flag = {**current, **flag_from_input(body), "version": current.get("version")}
    return await _write(caller, current, flag)


async def delete_flag(caller: Caller[Store], current: dict[str, Any]) -> FlagWrite | None:
    """Mark the flag deleted (None: it was already)."""
    if current["deleted"]:
        return None
    return await _write(caller, current, {**current, "deleted": True})


async def rollback_flag(caller: Caller[Store], current: dict[str, Any], version: int) -> FlagWrite:
    """Restore an earlier version of the flag: an ordinary update (same validation, same
    optimistic version check) recorded as ``rolled_back``."""
    history = await caller.store.flag_versions(caller.project_id, current["id"])
    try:
        plan = plan_rollback(current["id"], history, current, version)
    except RollbackError as exc:
        raise ApiError(400, "invalid_input", str(exc), exc.field) from None
    flag = flag_from_input(plan.body, current)
    source = ChangeSource(
        actor=caller.source.actor, trigger=plan.trigger, activity=Activity.ROLLED_BACK
    )
    return await _write(caller, current, flag, source)


async def schedule_change(
    caller: Caller[Store],
    flag: dict[str, Any],
    operation: Operation,
    payload: dict[str, Any],
    run_at_ms: int,
) -> ScheduledChange | Held:
    """A change to ``flag`` that runs at ``run_at_ms`` (held for approval under the policy)."""
    held = await hold_schedule(caller, flag, operation, payload, run_at_ms)
    if held is not None:
        return held
    return await caller.store.create_scheduled_change(
        caller.project_id,
        flag["id"],
        operation,
        payload,
        run_at_ms,
        caller.principal.user_id,
        clock.now_ms(),
    )


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
