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

DEFAULT_CONTEXT_CACHE_MB = 16
"""Memory one worker's flag contexts may take (estimated); the cache starts over beyond it."""
CONTEXT_OVERHEAD = 600
"""Bytes a context costs besides its stored JSON (record, key, dict slot, empty dicts)."""
JSON_EXPANSION = 4
"""Decoded properties take about this many times the bytes of their JSON text."""


def context_size(json_bytes: int) -> int:
    """The estimated memory of a flag context read from ``json_bytes`` of stored JSON."""
    return CONTEXT_OVERHEAD + JSON_EXPANSION * json_bytes


def person_version(db_path: Path) -> ChangeCounter:
    """The person version of one database file (``<db>.person-version`` beside it)."""
    return ChangeCounter(db_path.parent, db_path.name + ".person-version")


class FlagContextCache:
    """A worker's stored flag contexts, valid while the person version has not moved."""

    __slots__ = ("_cell", "_contexts", "_seen", "bytes", "hits", "limit", "misses")

    def __init__(self, version: ChangeCounter, limit_bytes: int) -> None:
        self._cell = version.cell
        self._seen = -1
        self._contexts: dict[Any, FlagContext] = {}
        self.limit = limit_bytes
        """Estimated bytes the contexts may take (:func:`context_size`); 0 keeps none."""
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: Any) -> FlagContext | None:
        """The cached context, if nothing changed since it was read; else None."""
        now = self._cell.value
        if now != self._seen:
            self._contexts.clear()
            self.bytes = 0
            self._seen = now
            self.misses += 1
            return None
        context = self._contexts.get(key)
        if context is None:
            self.misses += 1
        else:
            self.hits += 1
        return context

    def put(self, key: Any, context: FlagContext, version: int, size: int) -> None:
        """Remember a context read after the counter showed ``version``, of ``size``
        estimated bytes; past the limit the cache starts over."""
        if version != self._seen or size > self.limit:
            return
        contexts = self._contexts
        if key not in contexts:
            if self.bytes + size > self.limit:
                contexts.clear()
                self.bytes = 0
            self.bytes += size
        contexts[key] = context

    @property
    def version(self) -> int:
        return self._cell.value
