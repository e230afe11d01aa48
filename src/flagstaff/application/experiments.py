"""Experiments: their results, read once for the API and the console, and the guardrail
check that the workers run (``server/guardrail_watch.py``).

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
from typing import Any, Protocol

import msgspec

from flagstaff.activity.records import ChangeSource
from flagstaff.application.flags import flag_from_input
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
    control_only_flag,
)
from flagstaff.experiments.model import CONTROL_VARIANT_KEY, applied_stats
from flagstaff.experiments.warm import RESULTS_MODULE
from flagstaff.ops import logs
from flagstaff.store.base import Store
from flagstaff.store.experiment_batch import ExperimentRecord

__all__ = [
    "ResultsStore",
    "check_guardrails",
    "experiment_summary",
    "results_json",
    "stop_experiment",
]


class ResultsStore(Protocol):
    """What the results read: an experiment's stored totals."""

    async def experiment_totals(self, experiment_id: int, fingerprint: str) -> ExperimentTotals: ...


async def _results_module() -> Any:
    """``experiments/results.py``, imported off the event loop: other requests go on while a
    cold worker imports scipy (once per worker)."""
    return await asyncio.to_thread(importlib.import_module, RESULTS_MODULE)


async def results_json(
    store: ResultsStore, record: ExperimentRecord, summary: ExperimentSummary | None = None
) -> dict[str, Any]:
    """The results response of one experiment (the endpoint's body; the console shows it),
    from ``summary`` when the caller read the totals already."""
    results_module = await _results_module()
    build_results, to_json = results_module.build_results, results_module.to_json
    if summary is None:
        summary = await experiment_summary(store, record)
    now = datetime.now(UTC)
    results: dict[str, Any] = to_json(build_results(record.definition, summary, now))
    results["experiment_id"] = record.id
    return results


async def experiment_summary(store: ResultsStore, record: ExperimentRecord) -> ExperimentSummary:
    """The experiment's stored totals (one read), summed over the lanes, per variant."""
    spec = ExperimentSpec(record.id, record.definition)
    return summarize(spec, await store.experiment_totals(record.id, spec.fingerprint))


# guardrails ---------------------------------------------------------------------------------


STOPPED_EARLY = "stopped_early"
"""PostHog's ``conclusion`` of an experiment ended before its time."""


async def stop_experiment(
    store: Store, project_id: int, record: ExperimentRecord, breach: GuardrailBreach, now: datetime
) -> None:
    """End the experiment and serve everyone the control variant, with the breach as the
    reason in the flag's history."""
    current = await store.get_flag(project_id, record.feature_flag_id)
    flag = None
    if current is not None and not current.get("deleted"):
        wanted = control_only_flag(current, CONTROL_VARIANT_KEY)
        flag = flag_from_input({"filters": wanted["filters"]}, current)
        flag["id"] = current["id"]
    definition = msgspec.structs.replace(
        record.definition,
        end_date=now,
        conclusion=STOPPED_EARLY,
        conclusion_comment=breach_reason(breach),
    )
    source = ChangeSource(trigger=breach_trigger(record.id, breach))
    await store.update_experiment(project_id, record.id, definition, flag=flag, source=source)


async def check_guardrails(
    store: Store, now_ms: int, on_change: Callable[[], object] = lambda: None
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
