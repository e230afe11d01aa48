"""Experiment holdouts: the persons the flag engine serves ``holdout-<id>`` to instead of an
experiment's variants (``filters[0].rollout_percentage`` of them). Created, updated (the
flags of the experiments using a holdout are rewritten in the same transaction) and deleted
(refused while an experiment uses it) here, whoever asks; the rules are
``experiments/model.py``'s (:func:`~flagstaff.experiments.model.check_holdout`)."""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from flagstaff.activity.records import ChangeSource
from flagstaff.application.context import Caller
from flagstaff.application.errors import existing, invalid_input
from flagstaff.application.inputs import UNSET, UnsetType, given
from flagstaff.experiments.model import ExperimentInvalid, Holdout, check_holdout, convert_input
from flagstaff.store.experiment_batch import HoldoutRecord

__all__ = [
    "HoldoutInput",
    "HoldoutReads",
    "HoldoutStore",
    "create_holdout",
    "delete_holdout",
    "find_holdout",
    "holdout_input",
    "holdout_json",
    "holdouts",
    "update_holdout",
]


class HoldoutInput(msgspec.Struct, kw_only=True):
    """A holdout's request body (create and PATCH): a create needs ``name`` and ``filters``
    (``[{"properties": [], "rollout_percentage": N}]``), a PATCH changes the fields it sends."""

    name: str | UnsetType = UNSET
    filters: list[dict[str, Any]] | UnsetType = UNSET
    description: str | UnsetType | None = UNSET


class HoldoutReads(Protocol):
    async def list_holdouts(self, project_id: int) -> list[HoldoutRecord]: ...

    async def get_holdout(self, project_id: int, holdout_id: int) -> HoldoutRecord | None: ...


class HoldoutStore(HoldoutReads, Protocol):
    """What the holdout use cases read and write."""

    async def create_holdout(self, project_id: int, holdout: Holdout) -> HoldoutRecord: ...

    async def update_holdout(
        self, project_id: int, holdout_id: int, holdout: Holdout, *,
        source: ChangeSource | None = None,
    ) -> HoldoutRecord: ...  # fmt: skip

    async def delete_holdout(self, project_id: int, holdout_id: int) -> None: ...


def holdout_json(record: HoldoutRecord) -> dict[str, Any]:
    """The holdout in PostHog's shape (the API's answer)."""
    return msgspec.to_builtins(record)


def holdout_input(body: Any) -> HoldoutInput:
    """The request body as a :class:`HoldoutInput`, or a 400 naming the field."""
    try:
        return convert_input(HoldoutInput, body)
    except ExperimentInvalid as error:
        raise invalid_input(error) from None


def _checked(fields: dict[str, Any]) -> Holdout:
    """The holdout ``fields`` describe, its rules checked (a missing field is named)."""
    for name in ("name", "filters"):
        if name not in fields:
            raise invalid_input(ExperimentInvalid([(name, "This field is required.")]))
    holdout = Holdout(**fields)
    try:
        check_holdout(holdout)
    except ExperimentInvalid as error:
        raise invalid_input(error) from None
    return holdout


async def holdouts(store: HoldoutReads, project_id: int) -> list[HoldoutRecord]:
    return await store.list_holdouts(project_id)


async def find_holdout(store: HoldoutReads, project_id: int, holdout_id: int) -> HoldoutRecord:
    """The holdout, or a 404."""
    return existing(await store.get_holdout(project_id, holdout_id), "holdout")


async def create_holdout(caller: Caller[HoldoutStore], data: HoldoutInput) -> HoldoutRecord:
    holdout = _checked(given(data))
    return await caller.store.create_holdout(caller.project_id, holdout)


async def update_holdout(
    caller: Caller[HoldoutStore], record: HoldoutRecord, data: HoldoutInput
) -> HoldoutRecord:
    """The fields sent replace those of ``record`` (the stored holdout, :func:`find_holdout`);
    the flags of the experiments using the holdout are rewritten with its new percentage."""
    fields = {"name": record.name, "description": record.description, "filters": record.filters}
    holdout = _checked({**fields, **given(data)})
    return await caller.store.update_holdout(
        caller.project_id, record.id, holdout, source=caller.source
    )


async def delete_holdout(caller: Caller[HoldoutStore], holdout_id: int) -> None:
    """Refused (the store's ``Conflict``, a 400 on ``holdout``) while an experiment uses it."""
    record = await find_holdout(caller.store, caller.project_id, holdout_id)
    await caller.store.delete_holdout(caller.project_id, record.id)
