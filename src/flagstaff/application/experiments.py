"""Experiments, whoever asks (the management API, the console, the guardrail job): created
with their flag (or linked to an existing one), updated (PATCH and PUT: launching, stopping,
shipping, archiving, changing variants or the holdout before launch), soft-deleted; their
results, read once for the API and the console; and the guardrail check that the workers run
(``server/guardrail_watch.py``).

A request body is one :class:`ExperimentInput` (create, PATCH and PUT), decoded by
:func:`experiment_input`; its rules besides types are ``experiments/model.py``'s
(:func:`~flagstaff.experiments.model.check_experiment`, the flag key rule included), applied
once to the definition the body asks for. The flag an experiment creates or rewrites goes
through :func:`flagstaff.application.flags.flag_from_input`, as the flags API's do.

A breach (``experiments/guardrails.py``) is reported once, whichever worker or node sees it
first: the store remembers it in the transaction that writes its activity record
(``Experiment`` / ``guardrail_breached``) and so its webhook deliveries
(``experiment.guardrail_breached``, the metric, variant and interval in
``activity.detail.trigger.payload``). With ``stats_config.auto_stop`` the same breach also
ends the experiment and serves the control variant to everyone: a flag change through the
ordinary update path (:func:`flagstaff.application.flags.flag_from_input`), in the flag's
history with the reason (``detail.trigger``), and, like a scheduled change already approved,
not held by an approval policy."""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

import msgspec

from flagstaff.activity.records import ActivityRecord, ChangeSource
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, invalid_input
from flagstaff.application.flags import flag_from_input
from flagstaff.application.holdouts import HoldoutReads, holdout_json
from flagstaff.application.inputs import UNSET, UnsetType, given
from flagstaff.experiments.exposure import (
    ExperimentSpec,
    ExperimentSummary,
    ExperimentTotals,
    summarize,
)
from flagstaff.experiments.guardrails import (
    GuardrailBreach,
    breach_reason,
    breach_record,
    breach_trigger,
    control_only_filters,
)
from flagstaff.experiments.model import (
    CONTROL_VARIANT_KEY,
    ExperimentDefinition,
    ExperimentInvalid,
    ExposureCriteria,
    FrequentistOptions,
    Holdout,
    Metric,
    Parameters,
    StatsConfig,
    applied_stats,
    check_experiment,
    convert_input,
    experiment_flag,
    flag_eligibility_problem,
    link_existing_flag,
    same_flag_problem,
)
from flagstaff.experiments.warm import RESULTS_MODULE
from flagstaff.flags.records import FeatureFlag
from flagstaff.ops import logs
from flagstaff.store.experiment_batch import (
    ExperimentRecord,
    HoldoutRecord,
    spec_of,
    sum_totals,
    with_holdout,
)
from flagstaff.store.records import FlagWrite, Page

if TYPE_CHECKING:
    from flagstaff.experiments.results import ExperimentResults

__all__ = [
    "ExperimentInput",
    "ExperimentReads",
    "ExperimentStore",
    "ExperimentView",
    "ExposureStore",
    "GuardrailStore",
    "ResultsStore",
    "StatsConfigInput",
    "StopStore",
    "check_guardrails",
    "create_experiment",
    "delete_experiment",
    "eligible_flag_keys",
    "experiment_input",
    "experiment_json",
    "experiment_results",
    "experiment_summary",
    "experiment_view",
    "experiments_page",
    "exposures",
    "find_experiment",
    "results_json",
    "stop_experiment",
    "update_experiment",
]


# inputs -------------------------------------------------------------------------------------


class StatsConfigInput(msgspec.Struct, kw_only=True):
    """``stats_config`` as a request sends it (:class:`StatsConfig`'s fields): on create, a
    field left out or null takes the project's default (``experiment_stats_defaults``), else
    what it means in PostHog (see :func:`~flagstaff.experiments.model.applied_stats`)."""

    method: Literal["bayesian", "frequentist"] | UnsetType | None = UNSET
    frequentist: FrequentistOptions | UnsetType | None = UNSET
    sequential: bool | UnsetType | None = UNSET
    sequential_tuning_parameter: float | UnsetType | None = UNSET
    cuped: bool | UnsetType | None = UNSET
    cuped_lookback_days: int | UnsetType | None = UNSET
    multiple_testing_correction: (
        Literal["holm", "benjamini_hochberg", "none"] | UnsetType | None
    ) = UNSET
    minimum_detectable_effect: float | UnsetType | None = UNSET
    auto_stop: bool | UnsetType | None = UNSET


class ExperimentInput(msgspec.Struct, kw_only=True):
    """An experiment's request body, for create, PATCH and PUT: the fields of
    :class:`~flagstaff.experiments.model.ExperimentDefinition`. Create and PUT need ``name``
    and ``feature_flag_key`` (the fields left out take their defaults); a PATCH replaces the
    top-level fields it sends. ``holdout`` (an id or null) is how PostHog's clients send
    ``holdout_id``; the other fields PostHog sends (``filters``, ``type``...) are ignored."""

    name: str | UnsetType = UNSET
    feature_flag_key: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    parameters: Parameters | UnsetType = UNSET
    holdout_id: int | UnsetType | None = UNSET
    holdout: Annotated[
        Any,
        msgspec.Meta(
            description="PostHog's clients' holdout_id: an id or null (an object is ignored)"
        ),
    ] = UNSET
    start_date: datetime | UnsetType | None = UNSET
    end_date: datetime | UnsetType | None = UNSET
    archived: bool | UnsetType = UNSET
    stats_config: StatsConfigInput | UnsetType = UNSET
    exposure_criteria: ExposureCriteria | UnsetType = UNSET
    metrics: list[Metric] | UnsetType | None = UNSET
    metrics_secondary: list[Metric] | UnsetType | None = UNSET
    metrics_guardrail: list[Metric] | UnsetType | None = UNSET
    conclusion: str | UnsetType | None = UNSET
    conclusion_comment: str | UnsetType | None = UNSET


def experiment_input(body: Any) -> ExperimentInput:
    """The request body as an :class:`ExperimentInput`, or a 400 naming the field."""
    try:
        return convert_input(ExperimentInput, body)
    except ExperimentInvalid as error:
        raise invalid_input(error) from None


def _stats_config(sent: StatsConfigInput | None, defaults: dict[str, Any]) -> StatsConfig:
    fields = {} if sent is None else {k: v for k, v in given(sent).items() if v is not None}
    return convert_input(StatsConfig, {**defaults, **msgspec.to_builtins(fields)})


def _fields(data: ExperimentInput, stats_defaults: dict[str, Any] | None) -> dict[str, Any]:
    """The definition's fields ``data`` sets (``stats_defaults`` filling ``stats_config``'s
    left-out fields on create)."""
    fields = given(data)
    holdout = fields.pop("holdout", UNSET)
    if "holdout_id" not in fields and (holdout is None or type(holdout) is int):
        fields["holdout_id"] = holdout
    for name in ("metrics", "metrics_secondary", "metrics_guardrail"):
        if name in fields and fields[name] is None:
            fields[name] = []
    if stats_defaults is not None or "stats_config" in fields:
        sent = fields.pop("stats_config", None)
        fields["stats_config"] = _stats_config(sent, stats_defaults or {})
    return fields


def _whole(fields: dict[str, Any]) -> ExperimentDefinition:
    """The definition of a create or a PUT: the fields sent, the others their defaults."""
    for name in ("name", "feature_flag_key"):
        if name not in fields:
            raise ExperimentInvalid([(name, "This field is required.")])
    return ExperimentDefinition(**fields)


# stores -------------------------------------------------------------------------------------


class ResultsStore(Protocol):
    """What the results read: an experiment's stored totals."""

    async def experiment_totals(self, experiment_id: int, fingerprint: str) -> ExperimentTotals: ...


class ExperimentReads(HoldoutReads, ResultsStore, Protocol):
    """What reading experiments needs: them, their flag and holdout, their totals."""

    async def list_experiments(self, project_id: int, limit: int, offset: int) -> Page: ...

    async def get_experiment(
        self, project_id: int, experiment_id: int
    ) -> ExperimentRecord | None: ...

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None: ...


class StopStore(Protocol):
    """What stopping an experiment writes: its definition and its flag, in one transaction."""

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None: ...

    async def update_experiment(
        self, project_id: int, experiment_id: int, definition: ExperimentDefinition, *,
        deleted: bool = False, flag: FlagWrite | None = None,
        source: ChangeSource | None = None,
    ) -> ExperimentRecord: ...  # fmt: skip


class ExperimentStore(ExperimentReads, StopStore, Protocol):
    """What the experiment use cases read and write."""

    async def get_experiment_stats_defaults(self, project_id: int) -> dict[str, Any]: ...

    async def get_flag_by_key(self, project_id: int, key: str) -> FeatureFlag | None: ...

    async def create_experiment(
        self, project_id: int, definition: ExperimentDefinition, flag: FlagWrite, *,
        source: ChangeSource | None = None,
    ) -> ExperimentRecord: ...  # fmt: skip


class GuardrailStore(ResultsStore, StopStore, Protocol):
    """What the guardrail check reads and writes."""

    async def guarded_experiments(self) -> list[tuple[int, ExperimentRecord]]: ...

    async def report_guardrail_breach(
        self, project_id: int, experiment_id: int, metric_uuid: str, variant: str,
        record: ActivityRecord,
    ) -> bool: ...  # fmt: skip


# reads --------------------------------------------------------------------------------------


def _flag_json(flag: FeatureFlag | None) -> dict[str, Any] | None:
    if flag is None:
        return None
    keys = ("id", "key", "name", "active", "filters", "deleted", "version")
    return {k: getattr(flag, k) for k in keys}


def _variants_now(flag: FeatureFlag | None) -> list[dict[str, Any]]:
    """The variants and split the experiment's flag serves now (its multivariate filters)."""
    multivariate = (flag.filters if flag is not None else {}).get("multivariate") or {}
    variants = multivariate.get("variants") if isinstance(multivariate, dict) else None
    if not isinstance(variants, list):
        return []
    return [
        {k: v[k] for k in ("key", "name", "rollout_percentage") if k in v}
        for v in variants
        if isinstance(v, dict)
    ]


class ExperimentView(msgspec.Struct, frozen=True):
    """An experiment as the API shows it: the stored record with its flag and its holdout
    (None: gone, or none), read once (:func:`experiment_view`)."""

    record: ExperimentRecord
    flag: FeatureFlag | None
    holdout: HoldoutRecord | None


async def experiment_view(
    store: ExperimentReads, project_id: int, record: ExperimentRecord
) -> ExperimentView:
    """The experiment with its flag and holdout, as the API and the console show it."""
    flag = await store.get_flag(project_id, record.feature_flag_id)
    holdout = (
        await store.get_holdout(project_id, record.holdout_id)
        if record.holdout_id is not None
        else None
    )
    return ExperimentView(record, flag, holdout)


def experiment_json(view: ExperimentView) -> dict[str, Any]:
    """The experiment in PostHog's shape, with its flag and holdout (the API's answer)."""
    record, flag, holdout = view.record, view.flag, view.holdout
    out: dict[str, Any] = msgspec.to_builtins(record.definition)
    parameters = out.setdefault("parameters", {})
    parameters["feature_flag_variants"] = _variants_now(flag) or msgspec.to_builtins(
        record.definition.variants
    )
    out.update(
        id=record.id,
        feature_flag=_flag_json(flag),
        holdout=holdout_json(holdout) if holdout is not None else None,
        holdout_id=record.holdout_id,
        archived=record.archived,
        deleted=record.deleted,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )
    return out


async def experiments_page(
    store: ExperimentReads, project_id: int, limit: int, offset: int
) -> Page:
    """A page of the project's experiments (not deleted, newest first), as records."""
    page = await store.list_experiments(project_id, limit, offset)
    return Page(page.count, [r for r in page.results if not r.deleted])


async def find_experiment(
    store: ExperimentReads, project_id: int, experiment_id: int
) -> ExperimentRecord:
    """The experiment, or a 404 (a deleted one is gone)."""
    record = await store.get_experiment(project_id, experiment_id)
    if record is None or record.deleted:
        raise ApiError(404, "not_found", "no such experiment")
    return record


def eligible_flag_keys(flags: list[dict[str, Any]]) -> list[str]:
    """The keys of the flags an experiment can use (not deleted, eligible), sorted."""
    return sorted(
        str(flag["key"])
        for flag in flags
        if not flag.get("deleted") and flag_eligibility_problem(flag.get("filters") or {}) is None
    )


# writes -------------------------------------------------------------------------------------


async def _holdout_of(
    store: HoldoutReads, project_id: int, definition: ExperimentDefinition
) -> Holdout | None:
    if definition.holdout_id is None:
        return None
    record = await store.get_holdout(project_id, definition.holdout_id)
    if record is None:
        raise ApiError(
            400, "invalid_input", f"no holdout with id {definition.holdout_id}", "holdout"
        )
    return Holdout(name=record.name, filters=record.filters, description=record.description)


def _checked_flag(body: dict[str, Any], current: FeatureFlag | None) -> FlagWrite:
    """The flag write (a new flag from ``body``, or ``current``'s filters and active state
    from it), validated as the flags API would; errors name the experiment's fields."""
    try:
        if current is None:
            return FlagWrite(flag=flag_from_input(body, None))
        changes = {"filters": body["filters"], "active": body["active"]}
        checked = flag_from_input(changes, current)
    except ApiError as error:
        raise ApiError(
            400, error.code, f"the experiment's flag is invalid: {error.detail}", "feature_flag_key"
        ) from None
    return FlagWrite(flag=checked, flag_id=current.id, version=current.version)


async def create_experiment(
    caller: Caller[ExperimentStore], data: ExperimentInput
) -> ExperimentView:
    """A new experiment and its flag, in one transaction: a multivariate flag PostHog's way
    (active once started), or the existing flag with the key, linked (its variants become the
    experiment's). Left-out ``stats_config`` fields take the project's defaults."""
    store, project_id = caller.store, caller.project_id
    defaults = await store.get_experiment_stats_defaults(project_id)
    try:
        definition = _whole(_fields(data, defaults))
        check_experiment(definition)
        holdout = await _holdout_of(store, project_id, definition)
        existing = await store.get_flag_by_key(project_id, definition.feature_flag_key)
        if existing is not None:
            definition = link_existing_flag(definition, existing.filters)
    except ExperimentInvalid as error:
        raise invalid_input(error) from None
    if existing is not None:
        linked = with_holdout(existing, definition.holdout_id, holdout)
        active = linked.active or definition.start_date is not None
        flag = _checked_flag({"filters": linked.filters, "active": active}, existing)
    else:
        flag = _checked_flag(experiment_flag(definition, definition.holdout_id, holdout), None)
    record = await store.create_experiment(project_id, definition, flag, source=caller.source)
    return await experiment_view(store, project_id, record)


async def update_experiment(
    caller: Caller[ExperimentStore],
    record: ExperimentRecord,
    data: ExperimentInput,
    *,
    replace: bool,
) -> ExperimentView:
    """PATCH (``replace`` False: the fields sent replace the stored ones) or PUT (the body is
    the whole definition). The flag stays the experiment's; launching (a ``start_date`` on a
    draft) activates it; before launch the variants and the holdout are the flag's too, after
    it they cannot change. Stopping, shipping and archiving are fields of the definition
    (``end_date``, ``conclusion``, ``archived``). ``record`` is the stored experiment
    (:func:`find_experiment`: the caller answers 404 before it reads the body, as PostHog)."""
    store, project_id = caller.store, caller.project_id
    old = record.definition
    try:
        fields = _fields(data, None)
        definition = _whole(fields) if replace else msgspec.structs.replace(old, **fields)
        problem = same_flag_problem(old, definition.feature_flag_key)
        if problem is not None:
            raise ExperimentInvalid([problem])
        check_experiment(definition)
    except ExperimentInvalid as error:
        raise invalid_input(error) from None
    launched = old.start_date is not None
    if launched and definition.holdout_id != old.holdout_id:
        raise ApiError(
            400, "invalid_input", "The holdout of a launched experiment cannot change.", "holdout"
        )
    new_variants = msgspec.to_builtins(definition.variants)
    if launched and new_variants != msgspec.to_builtins(old.variants):
        raise ApiError(
            400,
            "invalid_input",
            "The variants of a launched experiment cannot change.",
            "parameters.feature_flag_variants",
        )
    current = await store.get_flag(project_id, record.feature_flag_id)
    flag = None
    if current is not None:
        filters, active = current.filters, current.active
        if not launched and definition.start_date is not None:
            active = True
        if definition.holdout_id != old.holdout_id:
            holdout = await _holdout_of(store, project_id, definition)
            filters = with_holdout(current, definition.holdout_id, holdout).filters
        if not launched and new_variants != msgspec.to_builtins(old.variants):
            filters = {**filters, "multivariate": {"variants": new_variants}}
        if (filters, active) != (current.filters, current.active):
            flag = _checked_flag({"filters": filters, "active": active}, current)
    else:
        await _holdout_of(store, project_id, definition)
    updated = await store.update_experiment(
        project_id, record.id, definition, flag=flag, source=caller.source
    )
    return await experiment_view(store, project_id, updated)


async def delete_experiment(caller: Caller[ExperimentStore], experiment_id: int) -> None:
    """Soft-delete: the experiment is gone from the API; its flag stays."""
    record = await find_experiment(caller.store, caller.project_id, experiment_id)
    await caller.store.update_experiment(
        caller.project_id, record.id, record.definition, deleted=True, source=caller.source
    )


# results ------------------------------------------------------------------------------------


async def _results_module() -> Any:
    """``experiments/results.py``, imported off the event loop: other requests go on while a
    cold worker imports scipy (once per worker)."""
    return await asyncio.to_thread(importlib.import_module, RESULTS_MODULE)


async def experiment_results(
    store: ResultsStore, record: ExperimentRecord, summary: ExperimentSummary | None = None
) -> ExperimentResults:
    """The results of one experiment now, from ``summary`` when the caller read the totals
    already (:func:`results_json` renders them)."""
    results_module = await _results_module()
    if summary is None:
        summary = await experiment_summary(store, record)
    results: ExperimentResults = results_module.build_results(
        record.definition, summary, datetime.now(UTC)
    )
    return results


def results_json(experiment_id: int, results: ExperimentResults) -> dict[str, Any]:
    """The results response of one experiment (the endpoint's body; the console shows it)."""
    from flagstaff.experiments.results import to_json  # loaded: ``results`` was built by it

    body = to_json(results)
    body["experiment_id"] = experiment_id
    return body


class ExposureStore(Protocol):
    """What the exposure counts read: the stored totals rows of many experiments at once."""

    async def experiment_totals_rows(
        self, experiment_ids: list[int]
    ) -> dict[int, list[tuple[str, bytes]]]: ...


async def exposures(
    store: ExposureStore,
    records: list[ExperimentRecord],
    spec: Callable[[ExperimentRecord], ExperimentSpec] = spec_of,
) -> dict[int, dict[str, int]]:
    """Each experiment's exposed persons per variant (holdouts included), from one read of
    the kept totals (``spec`` builds a record's spec: a caller may cache them)."""
    rows = await store.experiment_totals_rows([r.id for r in records])
    out = {}
    for record in records:
        record_spec = spec(record)
        totals = sum_totals(rows.get(record.id, []), record_spec.fingerprint)
        out[record.id] = summarize(record_spec, totals).exposures
    return out


async def experiment_summary(store: ResultsStore, record: ExperimentRecord) -> ExperimentSummary:
    """The experiment's stored totals (one read), summed over the lanes, per variant."""
    spec = ExperimentSpec(record.id, record.definition)
    return summarize(spec, await store.experiment_totals(record.id, spec.fingerprint))


# guardrails ---------------------------------------------------------------------------------


STOPPED_EARLY = "stopped_early"
"""PostHog's ``conclusion`` of an experiment ended before its time."""


async def stop_experiment(
    store: StopStore,
    project_id: int,
    record: ExperimentRecord,
    breach: GuardrailBreach,
    now: datetime,
) -> None:
    """End the experiment and serve everyone the control variant, with the breach as the
    reason in the flag's history."""
    current = await store.get_flag(project_id, record.feature_flag_id)
    flag = None
    if current is not None and not current.deleted:
        filters = control_only_filters(current.filters, CONTROL_VARIANT_KEY)
        changed = flag_from_input({"filters": filters}, current)
        flag = FlagWrite(flag=changed, flag_id=current.id, version=current.version)
    definition = msgspec.structs.replace(
        record.definition,
        end_date=now,
        conclusion=STOPPED_EARLY,
        conclusion_comment=breach_reason(breach),
    )
    source = ChangeSource(trigger=breach_trigger(record.id, breach))
    await store.update_experiment(project_id, record.id, definition, flag=flag, source=source)


async def check_guardrails(
    store: GuardrailStore, now_ms: int, on_change: Callable[[], object] = lambda: None
) -> int:
    """Judge every guarded experiment once; how many breaches were newly reported
    (``on_change`` after an auto-stop, so every worker serves the flag change at once)."""
    experiments = await store.guarded_experiments()
    if not experiments:
        return 0
    results = await _results_module()
    now = datetime.fromtimestamp(now_ms / 1000, UTC)
    reported = 0
    for project_id, record in experiments:
        definition = record.definition
        if definition.end_date is not None and definition.end_date <= now:
            continue
        summary = await experiment_summary(store, record)
        for breach in results.build_results(definition, summary, now).guardrail_breaches:
            activity = breach_record(project_id, record.id, definition.name, breach, now_ms)
            if not await store.report_guardrail_breach(
                project_id, record.id, breach.metric_uuid, breach.variant, activity
            ):
                continue
            reported += 1
            logs.log(
                logging.WARNING,
                "guardrail breached",
                experiment=record.id,
                reason=breach_reason(breach),
            )
            if applied_stats(definition.stats_config).auto_stop:
                await stop_experiment(store, project_id, record, breach, now)
                on_change()
                break  # stopped: the other breaches are reported on the next pass
    return reported


# recomputing from the stored events ---------------------------------------------------------


class RecomputeStore(Protocol):
    async def get_experiment(
        self, project_id: int, experiment_id: int
    ) -> ExperimentRecord | None: ...

    async def list_experiments(self, project_id: int, limit: int, offset: int) -> Page: ...

    async def recompute_experiment(self, project_id: int, experiment_id: int) -> int: ...

    async def experiment_totals(self, experiment_id: int, fingerprint: str) -> ExperimentTotals: ...


class Recomputed(msgspec.Struct, frozen=True):
    """One experiment rebuilt: the events read and the persons exposed per variant (None: not
    started, nothing computed)."""

    experiment_id: int
    events_read: int | None
    exposed: dict[str, int] | None


MAX_RECOMPUTED = 100_000


async def recompute(
    store: RecomputeStore, project_id: int, experiment_id: int | None
) -> list[Recomputed]:
    """Rebuild experiment ``experiment_id``'s aggregates (None: every started experiment's)
    from the stored events: after an import, or to check what ingestion kept."""
    if experiment_id is not None:
        found = await store.get_experiment(project_id, experiment_id)
        if found is None or found.deleted:
            raise ApiError(404, "not_found", f"no experiment with id {experiment_id}")
        records = [found]
    else:
        page = await store.list_experiments(project_id, MAX_RECOMPUTED, 0)
        records = [r for r in page.results if r.definition.start_date is not None]
    out = []
    for record in records:
        if record.definition.start_date is None:
            out.append(Recomputed(record.id, None, None))
            continue
        read = await store.recompute_experiment(project_id, record.id)
        totals = await store.experiment_totals(
            record.id, ExperimentSpec(record.id, record.definition).fingerprint
        )
        exposed = {k: v.exposed for k, v in totals.variants.items()}
        out.append(Recomputed(record.id, read, exposed))
    return out
