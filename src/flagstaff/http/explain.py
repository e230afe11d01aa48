"""``flagstaff flags explain``: read what /flags would read from the store, then explain.

The stored person (by distinct id), the stored groups named in ``--groups`` and the stored
experience-continuity overrides are read as /flags reads them, and overlaid the same way
(stored < ``--person-properties``); GeoIP is not applied (there is no client address).
Nothing is written. The explanation itself is pure: ``flags/explain.py``.
"""

from __future__ import annotations

import json
from typing import Any

from flagstaff.flags import EvalRequest
from flagstaff.flags.explain import Explanation, explain
from flagstaff.http.flags import group_keys, group_properties_for, person_properties_for
from flagstaff.store.base import Definitions, Store


class ExplainError(ValueError):
    """Bad command-line input (unparsable JSON, an unknown flag)."""


def json_object(text: str | None, option: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ExplainError(f"{option} is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ExplainError(f"{option} must be a JSON object")
    return value


async def explain_from_store(
    store: Store,
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
    store: Store,
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
