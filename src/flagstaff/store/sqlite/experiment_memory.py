"""Exposed persons' experiment states kept in memory by the SQLite ingest writer.

The ingest writer is the only process that writes ``experiment_person_state`` during
ingestion; every other write of it (launching, editing or recomputing an experiment) bumps the
project's definitions version in its transaction. So, per project and definitions version, the
states this process read or wrote are the stored ones, and a person it found without a state
(``None``) still has none: a batch reads back only the persons it has not seen yet. Rows are
still written in the batch's transaction; the memory is cleared with the person cache when a
transaction fails (the accumulator changes the remembered states before they are written).
"""

from __future__ import annotations

from collections.abc import Hashable

from flagstaff.experiments.exposure import PersonState

Entries = dict[int, dict[str, PersonState | None]]
"""Per experiment id, person uuid -> the stored state, or None: the person has none."""


class ExperimentMemory:
    def __init__(self, max_entries: int = 300_000) -> None:
        self.max_entries = max_entries
        self._projects: dict[int, tuple[Hashable, int, Entries]] = {}

    def entries(self, database: Hashable, project_id: int, version: int) -> Entries:
        """The project's remembered states, valid at this definitions version (emptied when
        the version or the database changed, or when they grew past ``max_entries``)."""
        found = self._projects.get(project_id)
        if (
            found is None
            or found[0] != database
            or found[1] != version
            or sum(map(len, found[2].values())) > self.max_entries
        ):
            found = self._projects[project_id] = (database, version, {})
        return found[2]

    def clear(self) -> None:
        self._projects.clear()
