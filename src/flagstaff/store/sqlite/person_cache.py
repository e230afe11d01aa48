"""Persons kept in memory by the only process that writes them (the SQLite ingest writer).

Valid only while no other process writes persons: the ingest writer holds an exclusive lock on
the data dir for its whole life. A failed transaction clears the cache, since the rules mutate
cached states before the write that would persist them.
"""

from __future__ import annotations

from flagstaff.ingest.persons import PersonState
from flagstaff.store.sqlite.experiment_memory import ExperimentMemory


class PersonCache:
    def __init__(self, max_persons: int = 200_000) -> None:
        self.max_persons = max_persons
        self._by_distinct_id: dict[tuple[int, str], PersonState] = {}
        self._by_id: dict[int, PersonState] = {}
        self.hits = 0
        self.misses = 0
        self.experiments = ExperimentMemory()
        """Experiment states of exposed persons, cleared with the persons."""

    def get(self, project_id: int, distinct_id: str) -> PersonState | None:
        state = self._by_distinct_id.get((project_id, distinct_id))
        if state is None:
            self.misses += 1
            return None
        while state.merged_into is not None:
            state = state.merged_into
        self.hits += 1
        return state

    def by_id(self) -> dict[int, PersonState]:
        return self._by_id

    def remember(self, project_id: int, states: dict[str, PersonState]) -> None:
        if len(self._by_distinct_id) + len(states) > self.max_persons:
            self.clear()
        for distinct_id, state in states.items():
            while state.merged_into is not None:
                state = state.merged_into
            if state.id is None:
                continue
            self._by_distinct_id[(project_id, distinct_id)] = state
            self._by_id[state.id] = state

    def forget(self, person_id: int) -> None:
        self._by_id.pop(person_id, None)

    def clear(self) -> None:
        self._by_distinct_id.clear()
        self._by_id.clear()
        self.experiments.clear()

    def __len__(self) -> int:
        return len(self._by_distinct_id)
