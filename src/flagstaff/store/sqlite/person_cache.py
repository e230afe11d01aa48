"""Persons kept in memory by the only process that writes them (the SQLite ingest writer).

Valid only while no other process writes persons: the ingest writer holds an exclusive lock on
the data dir for its whole life. A failed transaction clears the cache, since the rules mutate
cached states before the write that would persist them.
"""

from __future__ import annotations

from flagstaff.ingest.persons import PersonState
from flagstaff.store.sqlite.experiment_memory import ExperimentMemory

DEFAULT_PERSON_CACHE_MB = 64
"""Memory the ingest writer's cached persons may take (estimated), by default."""
PERSON_OVERHEAD = 500
"""Estimated bytes of a cached person besides its properties (state, uuid, dict slots)."""
PROPERTY_BYTES = 150
"""Estimated bytes of one stored property (key, value, dict slot)."""
DISTINCT_ID_BYTES = 150
"""Estimated bytes of one more distinct id pointing at a cached person."""


def person_size(state: PersonState) -> int:
    """The estimated memory of a cached person, from its number of properties."""
    return PERSON_OVERHEAD + PROPERTY_BYTES * len(state.properties)


class PersonCache:
    """Persons by distinct id, bounded by an estimate of their memory: past ``limit_bytes``
    it starts over (the persons are read again as events name them). A person's estimate is
    taken when it is first remembered."""

    def __init__(self, limit_bytes: int = DEFAULT_PERSON_CACHE_MB * 1024 * 1024) -> None:
        self.limit = limit_bytes
        self.bytes = 0
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
        by_distinct_id, by_id = self._by_distinct_id, self._by_id
        added = 0
        for distinct_id, state in states.items():
            while state.merged_into is not None:
                state = state.merged_into
            if state.id is None:
                continue
            key = (project_id, distinct_id)
            if key not in by_distinct_id:
                added += DISTINCT_ID_BYTES
            by_distinct_id[key] = state
            if state.id not in by_id:
                added += person_size(state)
            by_id[state.id] = state
        self.bytes += added
        if self.bytes > self.limit:
            self.clear()
            if added <= self.limit:  # start over with this batch's persons
                self.remember(project_id, states)

    def forget(self, person_id: int) -> None:
        self._by_id.pop(person_id, None)

    def clear(self) -> None:
        self._by_distinct_id.clear()
        self._by_id.clear()
        self.bytes = 0
        self.experiments.clear()

    def __len__(self) -> int:
        return len(self._by_distinct_id)
