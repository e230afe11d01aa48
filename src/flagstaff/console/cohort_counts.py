"""Counting the persons in dynamic cohorts: the flag engine's cohort matchers run over
batches of stored persons. Pure (persons in, counts out); the caller reads the batches and
bounds how many persons a count may read (:data:`COUNT_SCAN_LIMIT`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from flagstaff.console.team_views import DynamicCounts
from flagstaff.flags.cohorts import CohortCompiler
from flagstaff.flags.context import Context, EvaluationError, Matcher
from flagstaff.flags.flag_codegen import GeneratedSources
from flagstaff.flags.model import EvalRequest
from flagstaff.store.base import PersonRow

COUNT_SCAN_LIMIT = 20_000
"""Persons one page view checks at most: beyond, the counts are lower bounds (said so)."""
COUNT_BATCH = 1_000
"""Persons read and matched between two turns of the event loop (a few milliseconds)."""


class CohortCounter:
    """Counts the persons matching each dynamic cohort, one batch at a time (all cohorts in
    one pass, so each person's properties are read once). Call :meth:`close` when done."""

    def __init__(
        self, cohorts: Iterable[Mapping[str, Any]], only: Iterable[int] | None = None
    ) -> None:
        """``cohorts``: every cohort of the project (references resolve among them);
        ``only``: the ids to count (default: every dynamic one)."""
        definitions = {str(c["id"]): dict(c) for c in cohorts if not c.get("deleted")}
        wanted = None if only is None else set(only)
        self._sources = GeneratedSources()
        compiler = CohortCompiler(definitions, self._sources)
        self._matchers: dict[int, Matcher] = {
            int(c["id"]): compiler.membership(int(c["id"]))
            for c in definitions.values()
            if not c.get("is_static") and (wanted is None or int(c["id"]) in wanted)
        }
        self.uses_static = compiler.uses_static
        """Some dynamic cohort refers to a static one: persons need their static cohorts."""
        self.counts = dict.fromkeys(self._matchers, 0)
        self.failed: set[int] = set()
        self.scanned = 0

    @property
    def empty(self) -> bool:
        return not self._matchers

    def add(self, persons: Iterable[PersonRow]) -> None:
        matchers = self._matchers
        counts = self.counts
        for person in persons:
            self.scanned += 1
            ctx = Context(
                EvalRequest(
                    distinct_id="",
                    person_properties=person.properties,
                    static_cohort_ids=person.static_cohort_ids,
                )
            )
            for cohort_id, member in matchers.items():
                try:
                    if member(ctx):
                        counts[cohort_id] += 1
                except EvaluationError:
                    self.failed.add(cohort_id)

    def result(self, complete: bool) -> DynamicCounts:
        return DynamicCounts(dict(self.counts), frozenset(self.failed), self.scanned, complete)

    def close(self) -> None:
        self._sources.release()
