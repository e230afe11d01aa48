"""Experiments: their results, read once for the API and the console."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any, Protocol

from flagstaff.experiments.exposure import (
    ExperimentSpec,
    ExperimentSummary,
    ExperimentTotals,
    summarize,
)
from flagstaff.experiments.warm import RESULTS_MODULE
from flagstaff.store.experiment_batch import ExperimentRecord

__all__ = ["ResultsStore", "experiment_summary", "results_json"]


class ResultsStore(Protocol):
    """What the results read: an experiment's stored totals."""

    async def experiment_totals(self, experiment_id: int, fingerprint: str) -> ExperimentTotals: ...


async def results_json(
    store: ResultsStore, record: ExperimentRecord, summary: ExperimentSummary | None = None
) -> dict[str, Any]:
    """The results response of one experiment (the endpoint's body; the console shows it),
    from ``summary`` when the caller read the totals already."""
    # off the event loop: other requests go on while a cold worker imports scipy
    results_module = await asyncio.to_thread(importlib.import_module, RESULTS_MODULE)
    build_results, to_json = results_module.build_results, results_module.to_json
    if summary is None:
        summary = await experiment_summary(store, record)
    results: dict[str, Any] = to_json(build_results(record.definition, summary))
    results["experiment_id"] = record.id
    return results


async def experiment_summary(store: ResultsStore, record: ExperimentRecord) -> ExperimentSummary:
    """The experiment's stored totals (one read), summed over the lanes, per variant."""
    spec = ExperimentSpec(record.id, record.definition)
    return summarize(spec, await store.experiment_totals(record.id, spec.fingerprint))
