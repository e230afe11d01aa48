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
from flagstaff.flags.records import FeatureFlag
from flagstaff.store.records import FlagWrite, Page
from flagstaff.surveys import stats
from flagstaff.surveys.early_access import EarlyAccessFeature
from flagstaff.surveys.model import Survey
from tests.stored_flags import stored_flag

PROJECT = 1


class FakeStore:
    """SurveyStore and EarlyAccessStore in memory; flag writes are applied as the SQL store
    applies them (a new flag gets the next id and its id lands on ``target``)."""

    def __init__(self) -> None:
        self.flags: dict[int, FeatureFlag] = {}
        self.surveys: dict[str, Survey] = {}
        self.features: dict[str, EarlyAccessFeature] = {}
        self.writes: list[FlagWrite] = []
        self.aggregates: dict[str, stats.SurveyStats] = {}

    def _apply(self, record: Any, flags: list[FlagWrite]) -> Any:
        self.writes.extend(flags)
        for write in flags:
            if write.flag_id is None:
                flag_id = len(self.flags) + 1
                self.flags[flag_id] = stored_flag(write.flag, flag_id)
                assert write.target is not None
                record = msgspec.structs.replace(record, **{write.target: flag_id})
            else:
                before = self.flags[write.flag_id]
                assert write.version == before.version
                self.flags[write.flag_id] = stored_flag(
                    write.flag, write.flag_id, before.version + 1
                )
        return record

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None:
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
        ids = self.aggregates if survey_ids is None else survey_ids
        return {i: self.aggregates[i] for i in ids if i in self.aggregates}

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
    assert isinstance(made, surveys.ShownSurvey)
    survey = made.survey
    assert survey == store.surveys[survey.id] and survey.id != "ignored"
    assert survey.targeting_flag_id is not None and survey.internal_targeting_flag_id is not None
    targeting = made.flags[survey.targeting_flag_id]
    assert targeting.filters["groups"][0]["rollout_percentage"] == 20
    assert made.flags[survey.internal_targeting_flag_id].key.endswith("-custom")
    # rendered, the flags sit by role
    shown = surveys.survey_json(made)
    assert shown["targeting_flag"] == surveys.minimal_flag(targeting) and shown["id"] == survey.id

    patched = run(surveys.update_survey(who, survey.id, SurveyInput(description="d"), partial=True))
    assert patched.survey.description == "d" and patched.survey.questions == survey.questions
    archived = run(surveys.archive_survey(who, survey.id))
    assert archived.survey.archived is True
    assert store.flags[survey.internal_targeting_flag_id].active is False
    assert run(surveys.survey_of(who, survey.id)) == archived
    listed = run(surveys.list_surveys(who, 10, 0))
    assert listed == surveys.SurveyPage(1, [archived])

    run(surveys.delete_survey(who, survey.id))
    assert survey.id not in store.surveys
    assert all(f.deleted for f in store.flags.values())


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
    made = run(surveys.create_survey(who, inp)).survey
    assert made.current_iteration == 1
    listed = list(store.surveys.values())
    assert run(surveys.advance_iterations(store, PROJECT, listed)) is True
    assert store.surveys[made.id].current_iteration == 2
    assert run(surveys.advance_iterations(store, PROJECT, list(store.surveys.values()))) is False


def test_a_feature_takes_and_leaves_the_enrollment_condition() -> None:
    store = FakeStore()
    who = caller(store)
    made = run(
        early_access.create_feature(who, EarlyAccessFeatureInput(name="Dark mode", stage="beta"))
    )
    assert isinstance(made, early_access.ShownFeature)
    assert made.feature == store.features[made.feature.id]
    flag = made.flag
    assert flag is not None and flag.id == made.feature.feature_flag_id
    assert flag.key == "dark-mode" and flag.filters["super_groups"]
    assert early_access.feature_json(made)["feature_flag"] == surveys.minimal_flag(flag)
    feature_id = made.feature.id
    moved = run(
        early_access.update_feature(who, feature_id, EarlyAccessFeatureInput(stage="draft"))
    )
    assert moved.feature.stage == "draft"
    assert moved.flag is not None and moved.flag.filters["super_groups"] is None
    assert run(early_access.feature_of(who, feature_id)) == moved
    assert run(early_access.list_features(who, 10, 0)) == early_access.FeaturePage(1, [moved])
    # a second feature cannot take the same flag
    with pytest.raises(ApiError) as info:
        inp = EarlyAccessFeatureInput(name="Again", stage="beta", feature_flag_id=flag.id)
        run(early_access.create_feature(who, inp))
    assert info.value.attr == "feature_flag_id"
    run(early_access.delete_feature(who, feature_id))
    assert store.features == {} and not store.flags[flag.id].deleted


def test_counts_and_answers_are_records_the_adapters_render() -> None:
    store = FakeStore()
    who = caller(store)
    questions = [{"id": "q1", "type": "open", "question": "Why?"}]
    made = run(surveys.create_survey(who, SurveyInput(name="S", type="api", questions=questions)))
    survey = made.survey
    sent = {
        "event": "survey sent",
        "properties": {"$survey_id": survey.id, "$survey_response_q1": "Fast"},
        "person": "p1",
        "timestamp_ms": 1_700_000_000_000,
        "uuid": str(uuid.uuid4()),
    }
    store.aggregates[survey.id] = stats.build([sent])

    counts = run(surveys.survey_stats(who, survey.id))
    assert counts == surveys.SurveyCounts(survey, store.aggregates[survey.id])
    body = surveys.survey_stats_json(counts)
    assert body == {
        **stats.stats_json(counts.aggregate),
        "survey_id": survey.id,
        "start_date": None,
        "end_date": None,
    }
    assert body["stats"]["survey sent"]["total_count"] == 1

    every = run(surveys.all_survey_stats(who))
    assert every.survey_count == 1
    assert surveys.all_survey_stats_json(every)["survey_count"] == 1

    answers = run(surveys.survey_summary(who, survey.id, question_id="q1", limit=5))
    assert (answers.survey, answers.question_id, answers.limit) == (survey, "q1", 5)
    summary = surveys.survey_summary_json(answers)
    assert summary["survey_id"] == survey.id and summary["responses"] == 1
    [question] = summary["questions"]
    assert question["open_answers"]["results"][0]["response"] == "Fast"
    with pytest.raises(ApiError) as info:
        run(surveys.survey_summary(who, survey.id, question_id="nope"))
    assert info.value.attr == "question_id"
