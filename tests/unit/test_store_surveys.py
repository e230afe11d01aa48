"""The survey and early access part of the Store contract, on SQLite and PostgreSQL: a save and
the flags it writes are one transaction; survey events are counted once, at ingest."""

from __future__ import annotations

import msgspec
import pytest

from flagstaff.flags.records import FlagDefinition
from flagstaff.store.base import Conflict, FlagWrite, Store
from flagstaff.surveys import stats
from flagstaff.surveys.early_access import EarlyAccessFeature
from flagstaff.surveys.model import Survey
from tests.unit.test_store_contract import FLAG, TOKEN, Factory, backend, ev, run

__all__ = ["backend"]  # the fixture, parametrised over both engines

SID = "0193a000-0000-4000-8000-0000000000c1"


def _flag(key: str) -> FlagDefinition:
    return msgspec.structs.replace(FLAG, key=key)


def test_a_survey_save_and_its_flags_are_one_transaction(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        v0 = await store.definitions_version(pid)
        survey = Survey(id=SID, name="NPS", type="popover", responses_limit=2)
        writes = [
            FlagWrite(flag=_flag("survey-targeting-a"), target="targeting_flag_id"),
            FlagWrite(flag=_flag("survey-targeting-a-custom"), target="internal_targeting_flag_id"),
        ]
        saved = await store.save_survey(pid, survey, writes, create=True)
        assert saved.targeting_flag_id is not None and saved.internal_targeting_flag_id
        assert await store.get_survey(pid, SID) == saved
        assert await store.definitions_version(pid) > v0
        snapshot = await store.surveys_snapshot(pid)
        assert snapshot.surveys == [saved] and snapshot.responses == {}
        assert set(snapshot.flag_keys.values()) == {
            "survey-targeting-a",
            "survey-targeting-a-custom",
        }

        # a taken flag key or a taken name rolls the whole save back
        await store.create_flag(pid, _flag("taken"))
        for writes, name, field in (
            (
                [
                    FlagWrite(flag=_flag("fresh"), target="targeting_flag_id"),
                    FlagWrite(flag=_flag("taken"), target="internal_targeting_flag_id"),
                ],
                "Other",
                "key",
            ),
            ([FlagWrite(flag=_flag("fresh"), target="targeting_flag_id")], "NPS", "name"),
        ):
            with pytest.raises(Conflict) as err:
                await store.save_survey(
                    pid, Survey(id="other", name=name, type="api"), writes, create=True
                )
            assert err.value.field == field
            assert await store.get_survey(pid, "other") is None
            assert await store.get_flag_by_key(pid, "fresh") is None
        assert await store.survey_names(pid) == {"NPS"}
        assert (await store.list_surveys(pid, 10, 0)).results == [saved]

        # survey events: counted once per uuid, only for surveys that exist
        shown = ev(
            "survey shown",
            "u1",
            props={"$survey_id": SID},
            uid="0193a000-0000-7000-8000-000000000001",
        )
        sent = [
            ev(
                "survey sent",
                f"u{n}",
                props={
                    "$survey_id": SID,
                    "$survey_submission_id": f"s{n}",
                    "$survey_response": "yes",
                },
                uid=f"0193a000-0000-7000-8000-00000000001{n}",
            )
            for n in range(2)
        ]
        stray = ev("survey shown", "u9", props={"$survey_id": "nope"})
        version = await store.definitions_version(pid)
        await store.ingest(pid, [shown, stray, sent[0]], [])
        await store.ingest(pid, [shown, sent[0]], [])  # the same events again
        counted = (await store.survey_aggregates(pid, [SID]))[SID]
        assert counted.counts[stats.SHOWN].total == 1 and counted.responses == 1
        assert await store.definitions_version(pid) == version
        await store.ingest(pid, [sent[1]], [])  # reaches responses_limit: caches must reload
        assert await store.definitions_version(pid) > version
        assert (await store.surveys_snapshot(pid)).responses == {SID: 2}
        assert set(await store.survey_aggregates(pid, None)) == {SID}

        internal = await store.get_flag(pid, saved.internal_targeting_flag_id)
        assert internal is not None
        gone = msgspec.structs.replace(internal, deleted=True)
        await store.delete_survey(pid, SID, [FlagWrite(flag=gone, flag_id=gone.id)])
        assert await store.get_survey(pid, SID) is None
        assert await store.survey_aggregates(pid, None) == {}
        assert (await store.get_flag(pid, gone.id) or gone).deleted is True

    run(backend, body)


def test_early_access_features_and_their_flag(backend: Factory) -> None:
    async def body(store: Store) -> None:
        pid = (await store.create_project("P", TOKEN)).id
        feature = EarlyAccessFeature(id="f1", name="Dark mode", stage="beta")
        saved = await store.save_early_access_feature(
            pid,
            feature,
            [FlagWrite(flag=_flag("dark-mode"), target="feature_flag_id")],
            create=True,
        )
        assert saved.feature_flag_id is not None
        assert await store.early_access_feature_of_flag(pid, saved.feature_flag_id) == "f1"
        assert await store.get_early_access_feature(pid, "f1") == saved
        twin = EarlyAccessFeature(
            id="f2", name="Twin", stage="beta", feature_flag_id=saved.feature_flag_id
        )
        with pytest.raises(Conflict) as err:
            await store.save_early_access_feature(pid, twin, [], create=True)
        assert err.value.field == "feature_flag_id"
        moved = await store.save_early_access_feature(
            pid, EarlyAccessFeature(**{**_fields(saved), "stage": "alpha"}), [], create=False
        )
        page = await store.list_early_access_features(pid, 10, 0)
        assert page.count == 1 and page.results == [moved]
        snapshot = await store.surveys_snapshot(pid)
        assert snapshot.features == [moved] and snapshot.flag_keys == {
            saved.feature_flag_id: "dark-mode"
        }
        await store.delete_early_access_feature(pid, "f1", [])
        assert await store.get_early_access_feature(pid, "f1") is None
        assert await store.get_flag(pid, saved.feature_flag_id) is not None

    run(backend, body)


def _fields(feature: EarlyAccessFeature) -> dict:
    return {f: getattr(feature, f) for f in feature.__struct_fields__}
