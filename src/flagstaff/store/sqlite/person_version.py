"""The data dir's person version: one number that every commit changing persons, distinct ids,
groups, hash-key overrides or static cohort members increments, shared by every process.

It is a :class:`~flagstaff.store.changes.ChangeCounter` in ``<db>.person-version``: reading it
is one 8-byte load, so a worker can check it on every /flags request and keep the stored flag
contexts it read (:class:`FlagContextCache`) for as long as it has not moved. Writers
increment it right after their ``COMMIT``, before any request is answered: an ``$identify``
or ``$set`` acknowledged with a 200 has moved it, and the next /flags request on any worker
reads the person again (read-your-writes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flagstaff.store.changes import ChangeCounter
from flagstaff.store.records import FlagContext

MAX_CONTEXTS = 20_000
"""Flag contexts one worker keeps (a few KB each); the cache starts over beyond it."""


def person_version(db_path: Path) -> ChangeCounter:
    """The person version of one database file (``<db>.person-version`` beside it)."""
    return ChangeCounter(db_path.parent, db_path.name + ".person-version")


class FlagContextCache:
    """A worker's stored flag contexts, valid while the person version has not moved."""

    __slots__ = ("_cell", "_contexts", "_seen", "hits", "misses")

    def __init__(self, version: ChangeCounter) -> None:
        self._cell = version.cell
        self._seen = -1
        self._contexts: dict[Any, FlagContext] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: Any) -> FlagContext | None:
        """The cached context, if nothing changed since it was read; else None."""
        now = self._cell.value
        if now != self._seen:
            self._contexts.clear()
            self._seen = now
            self.misses += 1
            return None
        context = self._contexts.get(key)
        if context is None:
            self.misses += 1
        else:
            self.hits += 1
        return context

    def put(self, key: Any, context: FlagContext, version: int) -> None:
        """Remember a context read after the counter showed ``version``."""
        if version != self._seen:
            return
        contexts = self._contexts
        if len(contexts) >= MAX_CONTEXTS:
            contexts.clear()
        contexts[key] = context

    @property
    def version(self) -> int:
        return self._cell.value
