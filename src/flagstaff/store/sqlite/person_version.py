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

from collections import OrderedDict
from pathlib import Path
from typing import Any

from flagstaff.store.changes import ChangeCounter
from flagstaff.store.records import FlagContext

DEFAULT_CONTEXT_CACHE_MB = 8
"""Memory one worker's flag contexts may take (estimated); the least recently used go first.
8 MB (~6,000 contexts): the answer cache in front of it answers a returning person's same
request, so a context serves only the same person asking differently; 16 MB put a worker at
1M persons above 100 MB (docs/benchmarks.md, issue 39)."""
CONTEXT_OVERHEAD = 800
"""Bytes a context costs besides its stored JSON (record, key, ordered dict's slot and link,
empty dicts); with :data:`JSON_EXPANSION` an upper bound of what tracemalloc measures
(``tests/unit/test_person_version.py``)."""
JSON_EXPANSION = 4
"""Decoded properties take at most about this many times the bytes of their JSON text."""


def context_size(json_bytes: int) -> int:
    """The estimated memory of a flag context read from ``json_bytes`` of stored JSON."""
    return CONTEXT_OVERHEAD + JSON_EXPANSION * json_bytes


def person_version(db_path: Path) -> ChangeCounter:
    """The person version of one database file (``<db>.person-version`` beside it)."""
    return ChangeCounter(db_path.parent, db_path.name + ".person-version")


class FlagContextCache:
    """A worker's stored flag contexts, valid while the person version has not moved; past
    its bound the least recently used go first (not all at once: a start-over dropped the
    persons coming back with the rest)."""

    __slots__ = ("_cell", "_contexts", "_seen", "bytes", "hits", "limit", "misses")

    def __init__(self, version: ChangeCounter, limit_bytes: int) -> None:
        self._cell = version.cell
        self._seen = -1
        self._contexts: OrderedDict[Any, tuple[FlagContext, int]] = OrderedDict()
        """Each context with its estimated size, the least recently used first."""
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
        entry = self._contexts.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._contexts.move_to_end(key)
        self.hits += 1
        return entry[0]

    def put(self, key: Any, context: FlagContext, version: int, size: int) -> None:
        """Remember a context read after the counter showed ``version``, of ``size``
        estimated bytes; past the limit the least recently used go."""
        if version != self._seen or size > self.limit:
            return
        contexts = self._contexts
        old = contexts.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        contexts[key] = (context, size)
        self.bytes += size
        while self.bytes > self.limit:
            self.bytes -= contexts.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._contexts)

    @property
    def version(self) -> int:
        return self._cell.value
