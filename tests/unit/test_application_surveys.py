"""The survey and early access use cases over a store of their narrow protocols only: what
they hand the store (the survey, the feature, the flag writes) and what they refuse."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from flagstaff.accounts.roles import AuthMethod, Principal, Role
from flagstaff.activity.records import ChangeSource
from flagstaff.application import early_access, surveys
from flagstaff.application.context import Caller
from flagstaff.application.early_access import EarlyAccessFeatureInput
from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import decode
from flagstaff.application.surveys import SurveyInput
from flagstaff.store.records import FlagWrite, Page
from flagstaff.surveys import stats
from flagstaff.surveys.early_access import EarlyAccessFeature
from flagstaff.surveys.model import Survey

PROJECT = 1


class FakeStore:
    """SurveyStore and EarlyAccessStore in memory; flag writes are applied as the SQL store
    applies them (a new flag gets the next id and its id lands on ``target``)."""

    def __init__(self) -> None:
        self.flags: dict[int, dict[str, Any]] = {}
        self.surveys: dict[str, Survey] = {}
        self.features: dict[str, EarlyAccessFeature] = {}
        self.writes: list[FlagWrite] = []

    def _apply(self, record: Any, flags: list[FlagWrite]) -> Any:
        self.writes.extend(flags)
        for write in flags:
            if write.flag_id is None:
                flag_id = len(self.flags) + 1
                self.flags[flag_id] = {**write.data, "id": flag_id}
                assert write.target is not None
                record = msgspec.structs.replace(record, **{write.target: flag_id})
            else:
                self.flags[write.flag_id] = {**write.data, "id": write.flag_id}
        return record

    async def get_flag(self, project_id: int, flag_id: int) -> dict[str, Any] | None:
        return self.flags.get(flag_id)

    async def list_surveys(self, project_id: int, limit: int, offset: int) -> Page:
        found = list(self.surveys.values())
        return Page(count=len(found), results=found[offset : offset + limit])

    async def get_survey(self, project_id: int, survey_id: str) -> Survey | None:
        return self.surveys.get(survey_id)

    async def survey_names(self, project_id: int) -> set[str]:
        return {s.name for s in self.surveys.values()}

    async def save_survey(
        self,
        project_id: int,
        survey: Survey,
        flags: list[FlagWrite],
        *,
        create: bool,
        source: ChangeSource | None = None,
    ) -> Survey:
        saved: Survey = self._apply(survey, flags)
        self.surveys[saved.id] = saved
        return saved

    async def delete_survey(
        self,
        project_id: int,
        survey_id: str,
        flags: list[FlagWrite],
        *,
        source: ChangeSource | None = None,
    ) -> None:
        self._apply(None, flags)
        del self.surveys[survey_id]

    async def survey_aggregates(
        self, project_id: int, survey_ids: list[str] | None
    ) -> dict[str, stats.SurveyStats]:
        return {}

    async def list_early_access_features(self, project_id: int, limit: int, offset: int) -> Page:
        found = list(self.features.values())
        return Page(count=len(found), results=found[offset : offset + limit])

    async def get_early_access_feature(
        self, project_id: int, feature_id: str
    ) -> EarlyAccessFeature | None:
        return self.features.get(feature_id)

    async def early_access_feature_of_flag(self, project_id: int, flag_id: int) -> str | None:
        return next((f.id for f in self.features.values() if f.feature_flag_id == flag_id), None)

    async def save_early_access_feature(
        self,
        project_id: int,
        feature: EarlyAccessFeature,
        flags: list[FlagWrite],
        *,
        create: bool,
        source: ChangeSource | None = None,
    ) -> EarlyAccessFeature:
        saved: EarlyAccessFeature = self._apply(feature, flags)
        self.features[saved.id] = saved
        return saved

    async def delete_early_access_feature(
        self,
        project_id: int,
        feature_id: str,
        flags: list[FlagWrite],
        *,
        source: ChangeSource | None = None,
    ) -> None:
        self._apply(None, flags)
        del self.features[feature_id]


def caller(store: FakeStore) -> Caller[FakeStore]:
    principal = Principal(PROJECT, Role.ADMIN, AuthMethod.PERSONAL_KEY, 1, "a@x.test")
    accounts: Any = None  # no use case here reads the accounts
    return Caller(store=store, accounts=accounts, project_id=PROJECT, principal=principal)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_survey_is_made_changed_and_deleted_with_its_flags() -> None:
    store = FakeStore()
    who = caller(store)
    body = {
        "name": "NPS",
        "type": "popover",
        "questions": [{"type": "open", "question": "Why?"}],
        "targeting_flag_filters": {"groups": [{"properties": [], "rollout_percentage": 20}]},
        "id": "ignored", "created_by": {"id": 9},  # read-only fields of an export
    }  # fmt: skip
    made = run(surveys.create_survey(who, decode(SurveyInput, body)))
    assert made["targeting_flag"]["filters"]["groups"][0]["rollout_percentage"] == 20
    assert made["internal_targeting_flag"]["key"].endswith("-custom")
    assert made["id"] != "ignored"

    patched = run(
        surveys.update_survey(who, made["id"], SurveyInput(description="d"), partial=True)
    )
    assert patched["description"] == "d" and patched["questions"] == made["questions"]
    archived = run(surveys.archive_survey(who, made["id"]))
    assert archived["archived"] is True
    assert store.flags[made["internal_targeting_flag"]["id"]]["active"] is False

    run(surveys.delete_survey(who, made["id"]))
    assert made["id"] not in store.surveys
    assert all(f["deleted"] for f in store.flags.values())


def test_survey_refusals_name_the_field() -> None:
    store = FakeStore()
    who = caller(store)
    with pytest.raises(ApiError) as info:
        run(surveys.create_survey(who, SurveyInput(type="api")))
    assert (info.value.status, info.value.attr) == (400, "name")
    with pytest.raises(ApiError) as info:
        run(surveys.survey_of(who, "not-a-uuid"))
    assert info.value.status == 404
    with pytest.raises(ApiError) as info:
        run(surveys.survey_of(who, str(uuid.uuid4())))
    assert info.value.status == 404


def test_recurring_surveys_move_to_the_running_iteration() -> None:
    store = FakeStore()
    who = caller(store)
    start = datetime.now(UTC) - timedelta(days=10)
    inp = SurveyInput(
        name="Monthly",
        type="api",
        start_date=start.isoformat(),
        iteration_count=3,
        iteration_frequency_days=7,
    )
    made = run(surveys.create_survey(who, inp))
    assert made["current_iteration"] == 1
    listed = list(store.surveys.values())
    assert run(surveys.advance_iterations(store, PROJECT, listed)) is True
    assert store.surveys[made["id"]].current_iteration == 2
    assert run(surveys.advance_iterations(store, PROJECT, list(store.surveys.values()))) is False


def test_a_feature_takes_and_leaves_the_enrollment_condition() -> None:
    store = FakeStore()
    who = caller(store)
    made = run(
        early_access.create_feature(who, EarlyAccessFeatureInput(name="Dark mode", stage="beta"))
    )
    flag = made["feature_flag"]
    assert flag["key"] == "dark-mode" and flag["filters"]["super_groups"]
    moved = run(
        early_access.update_feature(who, made["id"], EarlyAccessFeatureInput(stage="draft"))
    )
    assert moved["stage"] == "draft" and moved["feature_flag"]["filters"]["super_groups"] is None
    # a second feature cannot take the same flag
    with pytest.raises(ApiError) as info:
        inp = EarlyAccessFeatureInput(name="Again", stage="beta", feature_flag_id=flag["id"])
        run(early_access.create_feature(who, inp))
    assert info.value.attr == "feature_flag_id"
    run(early_access.delete_feature(who, made["id"]))
    assert store.features == {} and not store.flags[flag["id"]]["deleted"]
