"""The running experiments kept in memory by the SQLite ingest writer, between batches.

The ingest writer is the only process that writes ``experiment_person_state`` and
``experiment_totals`` during ingestion; every other write of them (launching, editing or
recomputing an experiment) bumps the project's definitions version in its transaction. So, per
project and definitions version, an accumulator this process built from the stored totals, and
filled with the persons' states it read or wrote, holds what is stored: a batch reads back only
the persons it has not seen yet (and remembers those it found without a state), adds its events
and writes the changed persons and the totals as they now are, with no read of the totals.
Rows are still written in the batch's transaction; the memory is cleared with the person cache
when a transaction fails (the accumulator changed before the write that would persist it).
"""

from __future__ import annotations

from collections.abc import Hashable

from flagstaff.experiments.exposure import ExperimentAccumulator


class Remembered:
    """One project's running experiments at one definitions version of one database."""

    __slots__ = ("absent", "accumulator", "database", "version")

    def __init__(
        self, database: Hashable, version: int, accumulator: ExperimentAccumulator
    ) -> None:
        self.database = database
        self.version = version
        self.accumulator = accumulator
        """Built without increments: its totals are the stored ones."""
        self.absent: dict[int, set[str]] = {}
        """Per experiment, the persons known to have no stored state."""

    def size(self, experiment_ids: list[int]) -> int:
        accumulator = self.accumulator
        absent = self.absent
        return sum(
            len(accumulator.persons(eid)) + len(absent.get(eid, ())) for eid in experiment_ids
        )


class ExperimentMemory:
    def __init__(self, max_entries: int = 300_000) -> None:
        self.max_entries = max_entries
        self._projects: dict[int, Remembered] = {}

    def get(self, database: Hashable, project_id: int, version: int) -> Remembered | None:
        """The project's experiments if remembered for this database and version."""
        found = self._projects.get(project_id)
        if found is None or found.database != database or found.version != version:
            return None
        return found

    def keep(self, project_id: int, remembered: Remembered, experiment_ids: list[int]) -> None:
        """Remember after a batch, unless it grew past ``max_entries`` persons (then the
        next batch starts again from the stored totals)."""
        if remembered.size(experiment_ids) > self.max_entries:
            self._projects.pop(project_id, None)
        else:
            self._projects[project_id] = remembered

    def clear(self) -> None:
        self._projects.clear()
