"""The survey and early access pages over in-memory data: who may open which page, the 404s of
unknown ids, and what each page shows."""

from __future__ import annotations

import asyncio

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from flagstaff.accounts.records import Role
from flagstaff.application.surveys import ShownSurvey
from flagstaff.console.early_access import early_access_routes
from flagstaff.console.routes import ConsoleSettings, console_routes
from flagstaff.console.surveys import survey_routes
from flagstaff.flags.records import FeatureFlag
from flagstaff.store.base import Enrolled
from flagstaff.surveys import stats
from flagstaff.surveys.early_access import EarlyAccessFeature
from flagstaff.surveys.model import Survey
from tests.stored_flags import stored_flag
from tests.unit.console_fakes import MemoryAccounts, MemoryData
from tests.unit.test_console import FAST, PASSWORD, _login

FLAG = {"id": 3, "key": "beta-search", "deleted": False, "filters": {"groups": []}}


class MemorySurveys:
    def __init__(self) -> None:
        self.stored = {"s1": Survey(id="s1", name="Churn reasons", type="popover")}

    async def surveys(self, project_id: int) -> list[Survey]:
        return list(self.stored.values())

    async def survey(self, project_id: int, survey_id: str) -> Survey | None:
        return self.stored.get(survey_id)

    async def aggregates(
        self, project_id: int, survey_ids: list[str] | None
    ) -> dict[str, stats.SurveyStats]:
        return {}

    async def shown_survey(self, project_id: int, survey: Survey) -> ShownSurvey:
        return ShownSurvey(survey, {})

    async def property_keys(self, project_id: int) -> list[str]:
        return ["email"]


class MemoryFeatures:
    def __init__(self) -> None:
        self.stored = {
            "f1": EarlyAccessFeature(id="f1", name="Search", stage="beta", feature_flag_id=3)
        }

    async def features(self, project_id: int) -> list[EarlyAccessFeature]:
        return list(self.stored.values())

    async def feature(self, project_id: int, feature_id: str) -> EarlyAccessFeature | None:
        return self.stored.get(feature_id)

    async def flag(self, project_id: int, flag_id: int | None) -> FeatureFlag | None:
        return stored_flag(FLAG, 3) if flag_id == 3 else None

    async def boolean_flags(self, project_id: int) -> list[tuple[int, str]]:
        return [(3, "beta-search")]

    async def enrolled(self, project_id: int, flag_key: str) -> Enrolled:
        return Enrolled(0, [])

    async def enrolled_counts(self, project_id: int, flag_keys: list[str]) -> dict[str, int]:
        return {"beta-search": 2}


def _client(role: Role | None) -> TestClient:
    """A console with the survey and early access pages, signed in with ``role`` in project 1
    (``None``: not signed in)."""
    accounts = MemoryAccounts()

    async def setup() -> None:
        user = await accounts.create_user("ada@example.com", FAST.hash(PASSWORD), 0)
        await accounts.set_membership(user.id, 1, role or Role.EDITOR, 0)

    asyncio.run(setup())
    routes = console_routes(
        accounts,
        MemoryData(),
        ConsoleSettings(),
        lambda: 1_800_000_000_000,
        extra=[
            lambda pages: survey_routes(pages, MemorySurveys()),
            lambda pages: early_access_routes(pages, MemoryFeatures()),
        ],
    )
    client = TestClient(Starlette(routes=routes), base_url="http://console.test")
    if role is not None:
        assert _login(client).status_code == 303
    return client


PAGES = [
    "/surveys",
    "/surveys/new",
    "/surveys/s1",
    "/surveys/s1/edit",
    "/early_access",
    "/early_access/new",
    "/early_access/f1",
]


@pytest.mark.parametrize("path", PAGES)
def test_the_pages_send_strangers_to_the_login(path: str) -> None:
    answer = _client(None).get(path + "?project=1", follow_redirects=False)
    target = path.replace("/", "%2F") + "%3Fproject%3D1"
    assert answer.status_code == 303 and answer.headers["location"] == f"/login?next={target}"


@pytest.mark.parametrize("path", PAGES)
def test_the_pages_refuse_another_project(path: str) -> None:
    answer = _client(Role.EDITOR).get(path + "?project=2")
    assert answer.status_code == 403 and "You are not a member of this project" in answer.text


def test_editors_see_every_page() -> None:
    client = _client(Role.EDITOR)
    listed = client.get("/surveys")
    assert listed.status_code == 200 and "Churn reasons" in listed.text
    assert client.get("/surveys/new").status_code == 200
    assert "Churn reasons" in client.get("/surveys/s1").text
    assert "Churn reasons" in client.get("/surveys/s1/edit").text
    features = client.get("/early_access")
    assert features.status_code == 200 and "beta-search" in features.text
    assert client.get("/early_access/new").status_code == 200
    feature = client.get("/early_access/f1")
    assert feature.status_code == 200 and "Search" in feature.text


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/surveys/nope", "No such survey."),
        ("/surveys/nope/edit", "No such survey."),
        ("/early_access/nope", "No such early access feature."),
    ],
)
def test_unknown_ids_are_not_found(path: str, message: str) -> None:
    # A viewer too: an unknown survey is not found before the role is looked at.
    for role in (Role.EDITOR, Role.VIEWER):
        answer = _client(role).get(path)
        assert answer.status_code == 404 and message in answer.text


def test_viewers_read_the_pages() -> None:
    client = _client(Role.VIEWER)
    for path in ("/surveys", "/surveys/s1", "/early_access", "/early_access/f1"):
        assert client.get(path).status_code == 200, path


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/surveys/new", "Viewers cannot change surveys."),
        ("/surveys/s1/edit", "Viewers cannot change surveys."),
        ("/early_access/new", "Viewers cannot add features."),
    ],
)
def test_viewers_cannot_open_the_forms(path: str, message: str) -> None:
    answer = _client(Role.VIEWER).get(path)
    assert answer.status_code == 403 and message in answer.text
