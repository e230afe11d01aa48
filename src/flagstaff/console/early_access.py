"""The early access pages: ``/early_access`` (the list), ``/early_access/new`` (the form) and
``/early_access/{id}`` (details, the persons enrolled, stage changes and "move to general
availability", which also rolls the flag out to everyone through the flag's own update).
Enrolled persons are counted (on both pages) and listed from ``person_enrollments``, kept by
ingestion.
Changes are made by ``static/early_access.js`` through the management API."""

from __future__ import annotations

from typing import Protocol

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from flagstaff.accounts.roles import Action
from flagstaff.application import early_access as features
from flagstaff.application.errors import ApiError
from flagstaff.application.surveys import stored_flag
from flagstaff.console.page import Page, page_route
from flagstaff.console.routes import ConsolePages
from flagstaff.console.store_data import StoreConsoleData
from flagstaff.flags.records import FeatureFlag
from flagstaff.store.base import Enrolled, Store
from flagstaff.surveys.early_access import EarlyAccessFeature, flag_facts, link_problem

MAX_LISTED = 1000
ENROLLED_SHOWN = 100
VIEWERS_CANNOT = "Viewers cannot add features."
STAGE_LABELS = {
    "draft": "Draft",
    "concept": "Concept",
    "alpha": "Alpha",
    "beta": "Beta",
    "general-availability": "General availability",
    "archived": "Archived",
}
FORM_STAGES = ("concept", "alpha", "beta", "general-availability")


class FeatureRow(msgspec.Struct, frozen=True):
    id: str
    name: str
    stage: str
    flag_key: str
    flag_id: int | None
    enrolled: int


class EarlyAccessData(Protocol):
    async def features(self, project_id: int) -> list[EarlyAccessFeature]: ...

    async def feature(self, project_id: int, feature_id: str) -> EarlyAccessFeature | None: ...

    async def flag(self, project_id: int, flag_id: int | None) -> FeatureFlag | None: ...

    async def boolean_flags(self, project_id: int) -> list[tuple[int, str]]:
        """(id, key) of the flags a feature can take: boolean and person-based."""
        ...

    async def enrolled(self, project_id: int, flag_key: str) -> Enrolled: ...

    async def enrolled_counts(self, project_id: int, flag_keys: list[str]) -> dict[str, int]: ...


class StoreEarlyAccessData:
    def __init__(self, store: Store, console: StoreConsoleData) -> None:
        self.store = store
        self.console = console

    async def features(self, project_id: int) -> list[EarlyAccessFeature]:
        page = await features.features_page(self.store, project_id, MAX_LISTED, 0)
        return list(page.results)

    async def feature(self, project_id: int, feature_id: str) -> EarlyAccessFeature | None:
        try:
            return await features.find_feature(self.store, project_id, feature_id)
        except ApiError:
            return None

    async def flag(self, project_id: int, flag_id: int | None) -> FeatureFlag | None:
        return await stored_flag(self.store, project_id, flag_id)

    async def boolean_flags(self, project_id: int) -> list[tuple[int, str]]:
        linkable = []
        for f in await self.console.list_flags(project_id):
            facts = flag_facts(int(f["id"]), str(f["key"]), f.get("filters") or {})
            if not f.get("deleted") and link_problem(facts) is None:
                linkable.append((facts.id, facts.key))
        return sorted(linkable, key=lambda item: item[1])

    async def enrolled(self, project_id: int, flag_key: str) -> Enrolled:
        return await features.enrolled_persons(self.store, project_id, flag_key, ENROLLED_SHOWN)

    async def enrolled_counts(self, project_id: int, flag_keys: list[str]) -> dict[str, int]:
        return await features.enrollment_counts(self.store, project_id, flag_keys)


def early_access_routes(pages: ConsolePages, data: EarlyAccessData) -> list[BaseRoute]:
    async def list_page(request: Request, page: Page) -> Response:
        project = page.project
        found = []
        for feature in await data.features(project.id):
            flag = await data.flag(project.id, feature.feature_flag_id)
            found.append((feature, flag.key if flag else ""))
        counts = await data.enrolled_counts(project.id, [key for _, key in found if key])
        rows = [
            FeatureRow(
                feature.id,
                feature.name,
                STAGE_LABELS.get(feature.stage, feature.stage),
                key,
                feature.feature_flag_id,
                counts.get(key, 0) if key else 0,
            )
            for feature, key in found
        ]
        return page.render(
            "early_access.html",
            "early_access",
            rows=rows,
        )

    async def new_page(request: Request, page: Page) -> Response:
        project = page.project
        return page.render(
            "early_access_new.html",
            "early_access",
            flags=await data.boolean_flags(project.id),
            stages=[(s, STAGE_LABELS[s]) for s in FORM_STAGES],
        )

    async def feature_page(request: Request, page: Page) -> Response:
        project = page.project
        feature = await data.feature(project.id, str(request.path_params["feature_id"]))
        if feature is None:
            return page.not_found("No such early access feature.")
        flag = await data.flag(project.id, feature.feature_flag_id)
        enrolled = await data.enrolled(project.id, flag.key) if flag else Enrolled(0, [])
        return page.render(
            "early_access_feature.html",
            "early_access",
            feature=feature,
            stage_label=STAGE_LABELS.get(feature.stage, feature.stage),
            stages=list(STAGE_LABELS.items()),
            flag=flag,
            enrolled=enrolled,
            shown=ENROLLED_SHOWN,
        )

    return [
        page_route(pages, "/early_access", list_page),
        page_route(pages, "/early_access/new", new_page, Action.EDIT, VIEWERS_CANNOT),
        page_route(pages, "/early_access/{feature_id}", feature_page),
    ]
