"""The console's read views (:class:`~flagstaff.console.routes.ConsoleData`), read through the
application layer (``application/``). What is the console's own here is presentation: the
definitions and compiled flags kept per definitions version, and the rows its pages show."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flagstaff.activity.records import StoredActivity
from flagstaff.activity.rollback import FlagVersion
from flagstaff.activity.scheduled import ScheduledChange
from flagstaff.application import accounts, flag_usage, flags, people
from flagstaff.application.activity import flag_history
from flagstaff.application.flag_usage import FlagChecks
from flagstaff.application.flags import (
    ExplainError,
    explain_from_store,
    request_from_store,
)
from flagstaff.application.people import event_json
from flagstaff.console import usage
from flagstaff.console.charts import EVENT_CHART_CAP
from flagstaff.console.page import ProjectInfo
from flagstaff.console.views import EventRow, FlagUsage, PersonFlag, event_summary
from flagstaff.flags import CompiledFlags, compile_flags, evaluate
from flagstaff.flags.explain import Explanation, explain_many
from flagstaff.flags.records import FeatureFlag
from flagstaff.store.base import Definitions, Person, Store
from flagstaff.store.records import EventQuery

PROPERTY_SCAN_EVENTS = 500


class StoreConsoleData:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._definitions: dict[int, Definitions] = {}
        self._compiled_flags: dict[int, tuple[int, CompiledFlags]] = {}

    async def project(self, project_id: int) -> ProjectInfo | None:
        project = await accounts.find_project(self.store, project_id)
        return ProjectInfo(project.id, project.name) if project else None

    async def definitions(self, project_id: int) -> Definitions:
        """The project's flags, cohorts and group types, read again only when its definitions
        version moved (every flag, cohort and group type write moves it): with 1,000 flags,
        decoding them is most of a page's time. Callers must not change what they get."""
        version = await flags.definitions_version(self.store, project_id)
        cached = self._definitions.get(project_id)
        if cached is None or cached.version != version:
            cached = await flags.project_definitions(self.store, project_id)
            self._definitions[project_id] = cached
        return cached

    async def list_flags(self, project_id: int) -> list[dict[str, Any]]:
        return (await self.definitions(project_id)).flags

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None:
        return await flags.find_flag(self.store, project_id, flag_id)

    async def flag_last_seen(self, project_id: int, keys: Sequence[str]) -> dict[str, int]:
        return await flag_usage.last_seen(self.store, project_id, keys)

    async def flag_usage(
        self, project_id: int, now_ms: int, keys: Sequence[str]
    ) -> dict[str, FlagUsage]:
        rows = await flag_usage.daily_checks(self.store, project_id, keys, now_ms)
        return usage.usage_by_flag(rows, {}, now_ms)

    async def flag_checks(self, project_id: int, flag: FeatureFlag, now_ms: int) -> FlagChecks:
        return await flag_usage.window_checks(self.store, project_id, flag, now_ms)

    async def group_types(self, project_id: int) -> dict[int, str]:
        mapping = (await self.definitions(project_id)).group_type_mapping
        return {int(index): name for index, name in mapping.items()}

    async def list_cohorts(self, project_id: int) -> list[dict[str, Any]]:
        cohorts = (await self.definitions(project_id)).cohorts.values()
        return sorted(cohorts, key=lambda c: -int(c["id"]))

    async def property_keys(self, project_id: int) -> list[str]:
        """Person properties set and event properties sent by the newest events."""
        query = EventQuery(limit=PROPERTY_SCAN_EVENTS)
        rows = await people.newest_events(self.store, project_id, query)
        found: set[str] = set()
        for row in rows:
            for name in ("$set", "$set_once"):
                value = row.properties.get(name)
                if isinstance(value, dict):
                    found.update(k for k in value if isinstance(k, str))
            found.update(k for k in row.properties if not k.startswith("$"))
        return sorted(found)

    async def flag_activity(self, project_id: int, flag_id: int) -> list[StoredActivity]:
        return await flag_history(self.store, project_id, flag_id, 1000)

    async def flag_versions(self, project_id: int, flag_id: int) -> list[FlagVersion]:
        return await flags.flag_versions(self.store, project_id, flag_id)

    async def explain_flag(
        self,
        project_id: int,
        key: str,
        distinct_id: str,
        person_properties: dict[str, Any],
        groups: dict[str, Any],
    ) -> Explanation:
        try:
            return await explain_from_store(
                self.store,
                project_id,
                key,
                distinct_id,
                person_properties=person_properties,
                groups=groups,
            )
        except ExplainError as exc:
            raise ValueError(str(exc)) from None

    async def scheduled_changes(self, project_id: int, flag_id: int) -> list[ScheduledChange]:
        return await flags.scheduled_changes(self.store, project_id, flag_id)

    async def person(self, project_id: int, distinct_id: str) -> Person | None:
        return await people.stored_person(self.store, project_id, distinct_id)

    async def person_flags(self, project_id: int, distinct_id: str) -> list[PersonFlag]:
        """Every active flag's value for the person, as /flags answers (the engine, compiled
        once per definitions version); flags /flags leaves out (evaluation contexts, cycles)
        are explained one by one."""
        definitions, request = await request_from_store(
            self.store, project_id, distinct_id, {}, {}, None, await self.definitions(project_id)
        )
        shown = [
            flag
            for flag in sorted(definitions.flags, key=lambda f: str(f.get("key")))
            if flag.get("active", True) and not flag.get("deleted")
        ]
        results = {r.key: r for r in evaluate(self._compiled(project_id, definitions), request)}
        missing = [flag["key"] for flag in shown if flag["key"] not in results]
        explained = {}
        if missing:
            explained = {
                e.key: e
                for e in explain_many(
                    definitions.flags,
                    definitions.cohorts,
                    definitions.group_type_mapping,
                    missing,
                    request,
                )
            }
        rows = []
        for flag in shown:
            r = results.get(flag["key"]) or explained[flag["key"]]
            rows.append(PersonFlag(flag["id"], r.key, r.enabled, r.variant, r.reason_description))
        return rows

    async def events_per_minute(self, project_id: int, start_ms: int, minutes: int) -> list[int]:
        return await people.events_per_minute(
            self.store, project_id, start_ms, minutes, EVENT_CHART_CAP
        )

    def _compiled(self, project_id: int, definitions: Definitions) -> CompiledFlags:
        cached = self._compiled_flags.get(project_id)
        if cached is None or cached[0] != definitions.version:
            compiled = compile_flags(
                definitions.flags, definitions.cohorts, definitions.group_type_mapping
            )
            cached = self._compiled_flags[project_id] = (definitions.version, compiled)
        return cached[1]

    async def recent_events(
        self, project_id: int, event: str | None, distinct_id: str | None, limit: int
    ) -> list[EventRow]:
        query = EventQuery(distinct_id=distinct_id, event=event, limit=limit)
        rows = await people.newest_events(self.store, project_id, query)
        return [
            EventRow(
                uuid=e.uuid,
                event=e.event,
                distinct_id=e.distinct_id,
                timestamp=event_json(e)["timestamp"],
                summary=event_summary(e.properties),
            )
            for e in rows
        ]
