"""The experiment and holdout use cases (``application/experiments.py``,
``application/holdouts.py``) over an in-memory store of just the methods their protocols
name: the request Structs mirror the definitions, a create fills the project's stats
defaults, PATCH and PUT keep the flag, holdouts follow their rules, a guardrail stop ends the
experiment and serves control."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from flagstaff.accounts.records import Role
from flagstaff.accounts.roles import AuthMethod, Principal
from flagstaff.activity.records import ActivityRecord, ChangeSource
from flagstaff.application import experiments, holdouts
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.experiments.exposure import ExperimentSpec, ExperimentTotals, summarize
from flagstaff.experiments.guardrails import GuardrailBreach
from flagstaff.experiments.model import (
    ExperimentDefinition,
    Holdout,
    StatsConfig,
)
from flagstaff.experiments.results import ExperimentResults
from flagstaff.flags.records import FeatureFlag, flag_json
from flagstaff.store.experiment_batch import ExperimentRecord, HoldoutRecord
from flagstaff.store.records import Conflict, FlagWrite, Page

PROJECT = 1
STARTED = "2024-01-01T00:00:00Z"


class MemoryStore:
    """Experiments, holdouts and flags in dicts: :class:`experiments.ExperimentStore`,
    :class:`holdouts.HoldoutStore` and :class:`experiments.GuardrailStore`."""

    def __init__(self, stats_defaults: dict[str, Any] | None = None) -> None:
        self.flags: dict[int, FeatureFlag] = {}
        self.experiments: dict[int, ExperimentRecord] = {}
        self.holdouts: dict[int, HoldoutRecord] = {}
        self.stats_defaults = stats_defaults or {}
        self.breaches: set[tuple[int, str, str]] = set()

    def _write_flag(self, write: FlagWrite) -> int:
        flag_id = write.flag_id or len(self.flags) + 1
        before = self.flags.get(flag_id)
        if before is not None and write.version not in (None, before.version):
            raise Conflict.flag_version_stale()
        version = before.version + 1 if before is not None else 1
        stored = {**flag_json(write.flag), "id": flag_id, "version": version}
        self.flags[flag_id] = msgspec.convert(
            {**stored, "created_at": "", "updated_at": ""}, FeatureFlag
        )
        return flag_id

    async def get_experiment_stats_defaults(self, project_id: int) -> dict[str, Any]:
        return self.stats_defaults

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None:
        return self.flags.get(flag_id)

    async def get_flag_by_key(self, project_id: int, key: str) -> FeatureFlag | None:
        return next((f for f in self.flags.values() if f.key == key), None)

    async def list_experiments(self, project_id: int, limit: int, offset: int) -> Page:
        records = [r for r in reversed(self.experiments.values()) if not r.deleted]
        return Page(len(records), records[offset : offset + limit])

    async def get_experiment(self, project_id: int, experiment_id: int) -> ExperimentRecord | None:
        return self.experiments.get(experiment_id)

    async def create_experiment(
        self,
        project_id: int,
        definition: ExperimentDefinition,
        flag: FlagWrite,
        *,
        source: ChangeSource | None = None,
    ) -> ExperimentRecord:
        eid = len(self.experiments) + 1
        record = ExperimentRecord(
            eid, self._write_flag(flag), definition.holdout_id, definition, False, False, "", ""
        )
        self.experiments[eid] = record
        return record

    async def update_experiment(
        self,
        project_id: int,
        experiment_id: int,
        definition: ExperimentDefinition,
        *,
        deleted: bool = False,
        flag: FlagWrite | None = None,
        source: ChangeSource | None = None,
    ) -> ExperimentRecord:
        if flag is not None:
            self._write_flag(flag)
        old = self.experiments[experiment_id]
        record = msgspec.structs.replace(
            old,
            definition=definition,
            holdout_id=definition.holdout_id,
            archived=definition.archived,
            deleted=deleted,
        )
        self.experiments[experiment_id] = record
        return record

    async def experiment_totals(self, experiment_id: int, fingerprint: str) -> Any:
        raise AssertionError("not read here")

    async def guarded_experiments(self) -> list[tuple[int, ExperimentRecord]]:
        return []

    async def report_guardrail_breach(
        self,
        project_id: int,
        experiment_id: int,
        metric_uuid: str,
        variant: str,
        record: ActivityRecord,
    ) -> bool:
        before = len(self.breaches)
        self.breaches.add((experiment_id, metric_uuid, variant))
        return len(self.breaches) > before

    async def list_holdouts(self, project_id: int) -> list[HoldoutRecord]:
        return list(self.holdouts.values())

    async def get_holdout(self, project_id: int, holdout_id: int) -> HoldoutRecord | None:
        return self.holdouts.get(holdout_id)

    async def create_holdout(self, project_id: int, holdout: Holdout) -> HoldoutRecord:
        hid = len(self.holdouts) + 1
        filters = [{**holdout.filters[0], "variant": f"holdout-{hid}"}]
        record = HoldoutRecord(hid, holdout.name, holdout.description, filters, "", "")
        self.holdouts[hid] = record
        return record

    async def update_holdout(
        self,
        project_id: int,
        holdout_id: int,
        holdout: Holdout,
        *,
        source: ChangeSource | None = None,
    ) -> HoldoutRecord:
        record = HoldoutRecord(
            holdout_id, holdout.name, holdout.description, holdout.filters, "", ""
        )
        self.holdouts[holdout_id] = record
        return record

    async def delete_holdout(self, project_id: int, holdout_id: int) -> None:
        if any(r.holdout_id == holdout_id for r in self.experiments.values() if not r.deleted):
            raise Conflict.holdout_in_use(1)
        del self.holdouts[holdout_id]


def _caller(store: MemoryStore) -> Caller[MemoryStore]:
    principal = Principal(PROJECT, Role.ADMIN, AuthMethod.PERSONAL_KEY, 7)
    return Caller(store=store, accounts=None, project_id=PROJECT, principal=principal)  # type: ignore[arg-type]


def _create(store: MemoryStore, **body: Any) -> experiments.ExperimentView:
    data = experiments.experiment_input({"name": "Checkout", "feature_flag_key": "exp", **body})
    return asyncio.run(experiments.create_experiment(_caller(store), data))


def _update(
    store: MemoryStore, eid: int, body: Any, replace: bool = False
) -> experiments.ExperimentView:
    data = experiments.experiment_input(body)
    record = store.experiments[eid]
    return asyncio.run(experiments.update_experiment(_caller(store), record, data, replace=replace))


def _refused(call: Any) -> ApiError:
    with pytest.raises(ApiError) as refused:
        call()
    assert refused.value.status == 400
    return refused.value


def test_the_request_structs_carry_every_field_of_the_definitions() -> None:
    fields = set(experiments.ExperimentInput.__struct_fields__)
    assert set(ExperimentDefinition.__struct_fields__) <= fields
    assert fields - set(ExperimentDefinition.__struct_fields__) == {"holdout"}
    assert experiments.StatsConfigInput.__struct_fields__ == StatsConfig.__struct_fields__
    assert set(holdouts.HoldoutInput.__struct_fields__) == set(Holdout.__struct_fields__)


def test_a_refused_body_names_the_field_in_the_experiment_api_words() -> None:
    error = _refused(lambda: experiments.experiment_input({"name": 3}))
    assert (error.code, error.attr) == ("invalid_input", "name")
    error = _refused(lambda: experiments.experiment_input([1]))
    assert error.attr is None and error.detail == "Must be an object."
    error = _refused(lambda: _create(MemoryStore(), feature_flag_key=None))
    assert error.attr == "feature_flag_key"
    error = _refused(lambda: asyncio.run(experiments.create_experiment(
        _caller(MemoryStore()), experiments.experiment_input({"feature_flag_key": "k"})
    )))  # fmt: skip
    assert (error.attr, error.detail) == ("name", "name: This field is required.")
    error = _refused(lambda: _create(MemoryStore(), feature_flag_key="with space"))
    assert error.attr == "feature_flag_key"


def test_a_create_fills_what_stats_config_leaves_out_from_the_project_defaults() -> None:
    store = MemoryStore({"method": "frequentist", "sequential": True})
    created = _create(store, stats_config={"sequential": False, "cuped": None})
    config = created.record.definition.stats_config
    assert (config.method, config.sequential, config.cuped) == ("frequentist", False, None)
    assert _create(MemoryStore()).record.definition.stats_config.method == "bayesian"
    error = _refused(lambda: _create(store, stats_config={"cuped_lookback_days": 0}))
    assert error.attr == "stats_config.cuped_lookback_days"


def test_a_new_flag_is_made_or_an_eligible_one_linked() -> None:
    store = MemoryStore()
    created = _create(store)
    flag = store.flags[created.record.feature_flag_id]
    assert created.flag == flag and created.holdout is None
    assert flag.active is False
    assert [v.key for v in created.record.definition.variants] == ["control", "test"]
    shown = experiments.experiment_json(created)
    assert shown["id"] == created.record.id and shown["feature_flag"]["id"] == flag.id
    assert [v["key"] for v in shown["parameters"]["feature_flag_variants"]] == ["control", "test"]
    store.flags[9] = FeatureFlag(
        id=9, key="bool", filters={"groups": []}, version=1, created_at="", updated_at=""
    )
    assert _refused(lambda: _create(store, feature_flag_key="bool")).attr == "feature_flag_key"
    assert experiments.eligible_flag_keys([flag_json(f) for f in store.flags.values()]) == ["exp"]


def test_patch_and_put_keep_the_flag_and_launching_activates_it() -> None:
    store = MemoryStore()
    created = _create(store)
    eid, flag_id = created.record.id, created.record.feature_flag_id
    assert _refused(lambda: _update(store, eid, {"feature_flag_key": "other"})).attr == (
        "feature_flag_key"
    )
    renamed = _update(store, eid, {"name": "Renamed", "metrics": None})
    assert renamed.record.definition.name == "Renamed" and renamed.record.definition.metrics == []
    launched = _update(store, eid, {"start_date": "2024-01-01T00:00:00Z"})
    assert launched.record.definition.start_date == datetime(2024, 1, 1, tzinfo=UTC)
    assert store.flags[flag_id].active and launched.flag == store.flags[flag_id]
    variants = {"feature_flag_variants": [
        {"key": "control", "rollout_percentage": 30}, {"key": "test", "rollout_percentage": 70}
    ]}  # fmt: skip
    error = _refused(lambda: _update(store, eid, {"parameters": variants}))
    assert error.attr == "parameters.feature_flag_variants"
    replaced = _update(
        store, eid, {"name": "Whole", "feature_flag_key": "exp", "start_date": STARTED}, True
    )
    assert replaced.record.definition.name == "Whole"
    assert replaced.record.definition.description == ""
    asyncio.run(experiments.delete_experiment(_caller(store), eid))
    with pytest.raises(ApiError) as gone:
        asyncio.run(experiments.find_experiment(store, PROJECT, eid))
    assert gone.value.status == 404


def test_holdouts_follow_their_rules_and_experiments_take_them_by_either_name() -> None:
    store = MemoryStore()
    caller = _caller(store)
    made = asyncio.run(holdouts.create_holdout(
        caller, holdouts.holdout_input({"name": "Ten", "filters": [{"rollout_percentage": 10}]})
    ))  # fmt: skip
    assert isinstance(made, HoldoutRecord) and holdouts.holdout_json(made)["name"] == "Ten"
    hid = made.id
    error = _refused(lambda: asyncio.run(holdouts.create_holdout(
        caller, holdouts.holdout_input({"name": "x"})
    )))  # fmt: skip
    assert error.attr == "filters"
    too_many = holdouts.holdout_input({"filters": [{"rollout_percentage": 120}]})
    error = _refused(
        lambda: asyncio.run(holdouts.update_holdout(caller, store.holdouts[hid], too_many))
    )
    assert error.attr == "filters[0].rollout_percentage"
    renamed = asyncio.run(
        holdouts.update_holdout(
            caller, store.holdouts[hid], holdouts.holdout_input({"name": "Still ten"})
        )
    )
    assert renamed.name == "Still ten" and renamed.filters == made.filters
    assert asyncio.run(holdouts.holdouts(store, PROJECT)) == [renamed]
    created = _create(store, holdout=hid)
    assert created.record.holdout_id == hid and created.holdout == renamed
    assert experiments.experiment_json(created)["holdout"] == holdouts.holdout_json(renamed)
    flag = store.flags[created.record.feature_flag_id]
    assert flag.filters["holdout"] == {"id": hid, "exclusion_percentage": 10.0}
    assert _refused(lambda: _create(store, feature_flag_key="e2", holdout=999)).attr == "holdout"
    cleared = _update(store, created.record.id, {"holdout": None})
    assert cleared.record.holdout_id is None and cleared.holdout is None
    asyncio.run(holdouts.delete_holdout(caller, hid))
    assert asyncio.run(holdouts.holdouts(store, PROJECT)) == []


def test_a_guardrail_stop_ends_the_experiment_and_serves_control() -> None:
    store = MemoryStore()
    created = _create(store, start_date="2024-01-01T00:00:00Z")
    record = store.experiments[created.record.id]
    breach = GuardrailBreach(
        metric_uuid="m",
        metric_name="Errors",
        variant="test",
        goal="decrease",
        effect=0.2,
        confidence_interval=(0.1, 0.3),
        p_value=0.001,
    )
    now = datetime(2024, 2, 1, tzinfo=UTC)
    asyncio.run(experiments.stop_experiment(store, PROJECT, record, breach, now))
    stopped = store.experiments[created.record.id].definition
    assert stopped.end_date == now and stopped.conclusion == experiments.STOPPED_EARLY
    variants = store.flags[created.record.feature_flag_id].filters["multivariate"]["variants"]
    assert {v["key"]: v["rollout_percentage"] for v in variants} == {"control": 100, "test": 0}


def test_the_results_are_a_record_and_their_json_names_the_experiment() -> None:
    store = MemoryStore()
    record = store.experiments[_create(store, start_date=STARTED).record.id]
    summary = summarize(ExperimentSpec(record.id, record.definition), ExperimentTotals())
    results = asyncio.run(experiments.experiment_results(store, record, summary))
    assert isinstance(results, ExperimentResults) and results.stats_method == "bayesian"
    body = experiments.results_json(record.id, results)
    assert list(body)[-1] == "experiment_id" and body["experiment_id"] == record.id
    assert {k: v for k, v in body.items() if k != "experiment_id"} == msgspec.to_builtins(results)
