"""The data dir's person version: one number that every commit changing persons, distinct ids,
groups, hash-key overrides or static cohort members increments, shared by every process.

It lives in ``<db>.person-version``, mapped into each process's memory: reading it is one
8-byte load, so a worker can check it on every /flags request and keep the stored flag
contexts it read (:class:`FlagContextCache`) for as long as it has not moved. Writers
increment it right after their ``COMMIT``, still holding the data dir's writer lock (so
increments never race) and before any request is answered: an ``$identify`` or ``$set``
acknowledged with a 200 has moved it, and the next /flags request on any worker reads the
person again (read-your-writes).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from pathlib import Path
from typing import Any

from flagstaff.store.base import FlagContext

_SIZE = 8
MAX_CONTEXTS = 20_000
"""Flag contexts one worker keeps (a few KB each); the cache starts over beyond it."""


def version_path(db_path: Path) -> Path:
    return Path(str(db_path) + ".person-version")


class PersonVersion:
    """The shared counter of one database file, opened (created if needed) on construction.

    Hot paths read :attr:`cell` ``.value``. :meth:`bump` must be called with the writer lock
    held (see ``writer.write_transaction``).
    """

    def __init__(self, db_path: Path) -> None:
        self.path = version_path(db_path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)
            self._map: mmap.mmap | None = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        self.cell = ctypes.c_uint64.from_buffer(self._map)

    def bump(self) -> None:
        self.cell.value += 1

    def close(self) -> None:
        if self._map is not None:
            cell, self.cell = self.cell, ctypes.c_uint64(0)
            del cell
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None


class FlagContextCache:
    """A worker's stored flag contexts, valid while the person version has not moved."""

    __slots__ = ("_cell", "_contexts", "_seen", "hits", "misses")

    def __init__(self, version: PersonVersion) -> None:
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
