"""The experiment pages: ``/experiments`` (the list), ``/experiments/new`` (the form) and
``/experiments/{id}`` (results per metric, exposures over time, warnings, and the actions).

The figures are the results endpoint's own (``experiment_results`` rendered by
``results_json``, as ``GET .../experiments/{id}/results/`` answers them). Changes are made
by ``static/experiments.js`` through the management API (experiments, and the flag's own
update for shipping a variant, so the approval policy and the flag's history apply).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from flagstaff.accounts.roles import Action
from flagstaff.application import accounts, experiments, flags, people
from flagstaff.application.errors import ApiError
from flagstaff.common.clock import minute_text
from flagstaff.console import experiment_views
from flagstaff.console.page import Page, page_route
from flagstaff.console.routes import ConsolePages
from flagstaff.console.store_data import StoreConsoleData
from flagstaff.experiments.exposure import ExperimentSpec
from flagstaff.flags.records import FeatureFlag
from flagstaff.store.base import EventQuery, Store
from flagstaff.store.experiment_batch import ExperimentRecord

EVENT_SCAN = 500
"""How many of the newest events the form reads for the event and property suggestions."""
EVENTS_SEEN_TTL_S = 30.0
"""The suggestions are read again at most this often per project (a page view is cheaper)."""
MAX_LISTED = 1000
VIEWERS_CANNOT = "Viewers cannot make experiments."


class EventsSeen(msgspec.Struct, frozen=True):
    """Event names and their property keys among the newest events, for the metric builder."""

    events: list[str]
    properties: list[str]


class Results(msgspec.Struct, frozen=True):
    body: dict[str, Any]
    """The results endpoint's body."""
    exposure_days: dict[str, dict[int, int]]
    """Per variant (holdouts included), its exposed persons by their first exposure's day;
    each adds up to the body's exposures of the variant."""


class ExperimentData(Protocol):
    async def experiments(self, project_id: int) -> list[ExperimentRecord]:
        """Not deleted, newest first."""
        ...

    async def experiment(self, project_id: int, experiment_id: int) -> ExperimentRecord | None: ...

    async def exposures(self, records: list[ExperimentRecord]) -> dict[int, dict[str, int]]:
        """Each experiment's exposed persons per variant (holdouts included), from the kept
        totals."""
        ...

    async def results(self, record: ExperimentRecord) -> Results:
        """The results endpoint's body and the exposure days, from one read of the totals."""
        ...

    async def flag(self, project_id: int, flag_id: int) -> FeatureFlag | None: ...

    async def multivariate_flags(self, project_id: int) -> list[str]:
        """Keys of the flags an experiment can use: control first and two variants or more."""
        ...

    async def events_seen(self, project_id: int) -> EventsSeen: ...

    async def stats_defaults(self, project_id: int) -> dict[str, Any]:
        """The project's ``experiment_stats_defaults`` (the settings page sets them)."""
        ...


class StoreExperimentData:
    def __init__(self, store: Store, console: StoreConsoleData) -> None:
        self.store = store
        self.console = console
        self._seen: dict[int, tuple[float, EventsSeen]] = {}
        self._specs: dict[int, tuple[str, ExperimentSpec]] = {}

    async def experiments(self, project_id: int) -> list[ExperimentRecord]:
        page = await experiments.experiments_page(self.store, project_id, MAX_LISTED, 0)
        return list(page.results)

    async def experiment(self, project_id: int, experiment_id: int) -> ExperimentRecord | None:
        try:
            return await experiments.find_experiment(self.store, project_id, experiment_id)
        except ApiError:
            return None

    def _spec(self, record: ExperimentRecord) -> ExperimentSpec:
        """The record's spec, built again only when the record changed."""
        cached = self._specs.get(record.id)
        if cached is None or cached[0] != record.updated_at:
            cached = self._specs[record.id] = (
                record.updated_at,
                ExperimentSpec(record.id, record.definition),
            )
        return cached[1]

    async def exposures(self, records: list[ExperimentRecord]) -> dict[int, dict[str, int]]:
        return await experiments.exposures(self.store, records, self._spec)

    async def results(self, record: ExperimentRecord) -> Results:
        summary = await experiments.experiment_summary(self.store, record)
        results = await experiments.experiment_results(self.store, record, summary)
        return Results(experiments.results_json(record.id, results), summary.exposure_days)

    async def flag(self, project_id: int, flag_id: int) -> FeatureFlag | None:
        return await flags.find_flag(self.store, project_id, flag_id)

    async def multivariate_flags(self, project_id: int) -> list[str]:
        return experiments.eligible_flag_keys(await self.console.list_flags(project_id))

    async def stats_defaults(self, project_id: int) -> dict[str, Any]:
        return await accounts.experiment_stats_defaults(self.store, project_id)

    async def events_seen(self, project_id: int) -> EventsSeen:
        cached = self._seen.get(project_id)
        if cached is not None and time.monotonic() - cached[0] < EVENTS_SEEN_TTL_S:
            return cached[1]
        rows = await people.newest_events(self.store, project_id, EventQuery(limit=EVENT_SCAN))
        events: set[str] = set()
        properties: set[str] = set()
        for row in rows:
            if row.event == "$feature_flag_called" or row.event.startswith("$set"):
                continue
            events.add(row.event)
            properties.update(k for k in row.properties if not k.startswith("$"))
        seen = EventsSeen(sorted(events), sorted(properties))
        self._seen[project_id] = (time.monotonic(), seen)
        return seen


def _now() -> datetime:
    return datetime.now(UTC)


def experiment_routes(pages: ConsolePages, data: ExperimentData) -> list[BaseRoute]:
    async def list_page(request: Request, page: Page) -> Response:
        now = _now()
        records = await data.experiments(page.project.id)
        exposures = await data.exposures(records)
        rows = [experiment_views.experiment_row(r, exposures[r.id], now) for r in records]
        wanted = request.query_params.get("status", "")
        shown = [r for r in rows if r.status == wanted] if wanted else rows
        return page.render(
            "experiments.html",
            "experiments",
            rows=shown,
            total=len(rows),
            status=wanted,
        )

    async def new_page(request: Request, page: Page) -> Response:
        project = page.project
        return page.render(
            "experiment_new.html",
            "experiments",
            flags=await data.multivariate_flags(project.id),
            seen=await data.events_seen(project.id),
            metrics_json=json.dumps([]),
            defaults=experiment_views.form_stats_defaults(await data.stats_defaults(project.id)),
        )

    async def experiment_page(request: Request, page: Page) -> Response:
        project = page.project
        raw = request.path_params["experiment_id"]
        record = await data.experiment(project.id, int(raw)) if raw.isdigit() else None
        if record is None:
            return page.not_found("No such experiment.")
        definition = record.definition
        read = await data.results(record)
        results = read.body
        flag = await data.flag(project.id, record.feature_flag_id)
        variants = [v.key for v in definition.variants]
        timeline = None
        if definition.start_date is not None:
            end = definition.end_date
            span = experiment_views.exposure_days_span(
                read.exposure_days,
                int(definition.start_date.timestamp() * 1000),
                None if end is None else int(end.timestamp() * 1000),
                pages.clock(),
            )
            timeline = experiment_views.exposure_chart(read.exposure_days, span)
        undated = any(
            sum(read.exposure_days.get(key, {}).values()) != count
            for key, count in read.body["exposures"].items()
        )
        can_edit = page.can(Action.EDIT)
        return page.render(
            "experiment.html",
            "experiments",
            record=record,
            definition=definition,
            status=experiment_views.status_of(record, _now()),
            flag=flag,
            variants=variants,
            results=results,
            metrics=[experiment_views.metric_view(i, m) for i, m in enumerate(results["metrics"])],
            secondary=[
                experiment_views.metric_view(i, m, secondary=True)
                for i, m in enumerate(results["metrics_secondary"])
            ],
            guardrails=[
                experiment_views.metric_view(i, m, secondary="guardrail-")
                for i, m in enumerate(results.get("metrics_guardrail") or [])
            ],
            inference=experiment_views.inference(results["stats_config_applied"]),
            applied=results["stats_config_applied"],
            decision=results.get("decision"),
            timeline=timeline,
            undated=undated,
            can_edit=can_edit,
            seen=await data.events_seen(project.id) if can_edit else None,
            metrics_json=json.dumps(experiment_views.form_metrics(definition)),
            start=minute_text(definition.start_date),
            end=minute_text(definition.end_date),
        )

    return [
        page_route(pages, "/experiments", list_page),
        page_route(pages, "/experiments/new", new_page, Action.EDIT, VIEWERS_CANNOT),
        page_route(pages, "/experiments/{experiment_id}", experiment_page),
    ]
