"""What the team pages read (:class:`TeamData`), and its implementation over the application
layer's reads (``application/``)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from flagstaff.application import accounts, people
from flagstaff.application.cohorts import cohort_json, cohorts_page, find_cohort, member_sample
from flagstaff.application.flags import request_from_store
from flagstaff.console.cohort_counts import COUNT_BATCH, COUNT_SCAN_LIMIT, CohortCounter
from flagstaff.console.team_views import NO_COUNTS, DynamicCounts
from flagstaff.console.views import PersonFlag
from flagstaff.flags.explain import explain
from flagstaff.store.base import Group, Page, Project, Store, Usage
from flagstaff.store.records import Cohort

USAGE_COUNT_CAP = 1_000_000
"""Events and persons counted for the settings page at most (a walk of the index, in a thread
on SQLite): beyond, the page says "or more"."""
STATIC_MEMBERS_SHOWN = 100
GROUPS_PER_PAGE = 100
WARNINGS_PER_PAGE = 100


class TeamData(Protocol):
    """The team pages' reads."""

    async def project(self, project_id: int) -> Project | None: ...

    async def usage(self, project_id: int) -> Usage: ...

    async def event_retention(self, project_id: int) -> int | None:
        """Days the project keeps events; None: forever."""
        ...

    async def experiment_stats_defaults(self, project_id: int) -> dict[str, Any]:
        """The stats_config fields a new experiment takes when left out ({}: PostHog's)."""
        ...

    def quotas(self) -> tuple[int, int]:
        """The node's (flag requests, events) per minute and project; 0 is no quota."""
        ...

    async def cohorts(self, project_id: int) -> list[Cohort]: ...

    async def cohort(self, project_id: int, cohort_id: int) -> Cohort | None: ...

    async def dynamic_counts(
        self, project_id: int, cohorts: list[Cohort], only: list[int] | None = None
    ) -> DynamicCounts:
        """Persons in the dynamic cohorts among ``cohorts`` (all the project's, so references
        resolve), or in those of ``only``."""
        ...

    async def static_members(self, project_id: int, cohort_id: int) -> list[str]: ...

    async def group_types(self, project_id: int) -> dict[int, str]: ...

    async def groups(
        self, project_id: int, group_type_index: int, search: str, offset: int
    ) -> list[Group]: ...

    async def group(self, project_id: int, group_type_index: int, key: str) -> Group | None: ...

    async def group_flags(
        self, project_id: int, group_type_name: str, group_type_index: int, key: str
    ) -> list[PersonFlag]:
        """The value of every active flag matched by this group type, for the group now."""
        ...

    async def warnings(self, project_id: int, limit: int, offset: int) -> Page: ...


class StoreTeamData:
    def __init__(self, store: Store, flag_quota: int = 0, event_quota: int = 0) -> None:
        self.store = store
        self._quotas = (flag_quota, event_quota)

    async def project(self, project_id: int) -> Project | None:
        return await accounts.find_project(self.store, project_id)

    async def usage(self, project_id: int) -> Usage:
        return await people.project_usage(self.store, project_id, USAGE_COUNT_CAP)

    async def event_retention(self, project_id: int) -> int | None:
        return await accounts.event_retention(self.store, project_id)

    async def experiment_stats_defaults(self, project_id: int) -> dict[str, Any]:
        return await accounts.experiment_stats_defaults(self.store, project_id)

    def quotas(self) -> tuple[int, int]:
        return self._quotas

    async def cohorts(self, project_id: int) -> list[Cohort]:
        return list((await cohorts_page(self.store, project_id, 10_000, 0)).results)

    async def cohort(self, project_id: int, cohort_id: int) -> Cohort | None:
        return await find_cohort(self.store, project_id, cohort_id)

    async def dynamic_counts(
        self, project_id: int, cohorts: list[Cohort], only: list[int] | None = None
    ) -> DynamicCounts:
        """Persons in each dynamic cohort: every cohort matched in one pass over the persons
        in id order, :data:`COUNT_BATCH` at a time with a turn of the event loop between
        batches, and at most :data:`COUNT_SCAN_LIMIT` persons (then lower bounds). The flag
        engine's matchers read the cohorts in PostHog's JSON shape."""
        counter = CohortCounter([cohort_json(c) for c in cohorts], only)
        if counter.empty:
            counter.close()
            return NO_COUNTS
        after, complete = 0, False
        try:
            while counter.scanned < COUNT_SCAN_LIMIT:
                batch = await people.persons_after(
                    self.store, project_id, after, COUNT_BATCH, counter.uses_static
                )
                counter.add(batch)
                if len(batch) < COUNT_BATCH:
                    complete = True
                    break
                after = batch[-1].id
                await asyncio.sleep(0)
        finally:
            counter.close()
        return counter.result(complete)

    async def static_members(self, project_id: int, cohort_id: int) -> list[str]:
        return await member_sample(self.store, project_id, cohort_id, STATIC_MEMBERS_SHOWN)

    async def group_types(self, project_id: int) -> dict[int, str]:
        return await people.group_type_names(self.store, project_id)

    async def groups(
        self, project_id: int, group_type_index: int, search: str, offset: int
    ) -> list[Group]:
        return await people.matching_groups(
            self.store, project_id, group_type_index, search, GROUPS_PER_PAGE + 1, offset
        )

    async def group(self, project_id: int, group_type_index: int, key: str) -> Group | None:
        return await people.stored_group(self.store, project_id, group_type_index, key)

    async def group_flags(
        self, project_id: int, group_type_name: str, group_type_index: int, key: str
    ) -> list[PersonFlag]:
        definitions, request = await request_from_store(
            self.store, project_id, "", {}, {group_type_name: key}
        )
        rows = []
        for flag in sorted(definitions.flags, key=lambda f: str(f.get("key"))):
            filters = flag.get("filters") or {}
            if (
                not flag.get("active", True)
                or flag.get("deleted")
                or filters.get("aggregation_group_type_index") != group_type_index
            ):
                continue
            e = explain(
                definitions.flags,
                definitions.cohorts,
                definitions.group_type_mapping,
                flag["key"],
                request,
            )
            rows.append(PersonFlag(flag["id"], e.key, e.enabled, e.variant, e.reason_description))
        return rows

    async def warnings(self, project_id: int, limit: int, offset: int) -> Page:
        return await people.warnings_page(self.store, project_id, limit, offset)
