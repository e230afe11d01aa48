"""One writer thread per process, committing every queued write in one transaction.

Requests hand the writer a function of a connection; the writer drains whatever is queued,
runs each function inside its own savepoint (a failing one is rolled back alone), commits
once (an fsync with ``synchronous=FULL``) and only then resolves the callers' futures. While
one commit is syncing, new writes pile up and go into the next transaction: group commit,
with no timer to tune.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

WriteFn = Callable[[sqlite3.Connection], Any]
_STOP = object()

DEFAULT_MMAP_MB = 0
"""How much of the database file each connection maps into memory (SQLite's ``mmap_size``);
``FLAGSTAFF_SQLITE_MMAP_MB`` sets it. Off by default: pages are read into SQLite's own cache
(``cache_size``, per connection: below), so a process's memory is its own. With a map, every worker
also holds the file's pages it touched (256 MB each took a node with 1M persons from ~300 to
502 MB PSS for about 3% less CPU per ``/flags`` request; see docs/benchmarks.md)."""
WRITE_CACHE_KB = 65536
"""SQLite's page cache of a writing connection (the ingest writer's, a worker's writer): large,
as the ingest writer's steps over the growing indexes depend on it."""
READ_CACHE_KB = 8192
"""The page cache of a worker's read connections. Another connection's commit empties it, so
under ingestion a larger one buys nothing, and pages it misses come from the system's file
cache; 64 MB a connection kept a node at 1M persons at ~300 MB PSS, 32 MB at ~224-234 MB,
8 MB at ~198 MB for no more CPU per ``/flags`` request (docs/benchmarks.md)."""
MAX_MMAP_MB = 2047
"""SQLite's own ceiling (``SQLITE_MAX_MMAP_SIZE``, 0x7fff0000 bytes): it lowers larger values."""


def connect(
    path: Path, *, readonly: bool = False, mmap_mb: int = DEFAULT_MMAP_MB
) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute(f"PRAGMA cache_size=-{READ_CACHE_KB if readonly else WRITE_CACHE_KB}")
    conn.execute(f"PRAGMA mmap_size={mmap_mb * 1024 * 1024}")
    conn.execute("PRAGMA temp_store=MEMORY")
    if readonly:
        conn.execute("PRAGMA query_only=1")
    return conn


@contextlib.contextmanager
def writer_lock(fd: int) -> Iterator[None]:
    """Hold the data dir's writer lock (``<db>.writer-lock``) for one transaction.

    Every process that writes has one writing connection; SQLite would make the others wait in
    its busy handler, which sleeps in steps of up to 100 ms. A blocking flock hands the turn
    over the moment the holder commits.
    """
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def write_transaction(
    conn: sqlite3.Connection, lock_fd: int, after_commit: Callable[[], object] | None = None
) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` under the writer lock; rolled back if anything fails.

    ``after_commit`` runs once the commit is durable, still under the lock (the person
    version's increment, see ``person_version``).
    """
    with writer_lock(lock_fd):
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
            if after_commit is not None:
                after_commit()
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


class Writer:
    """The process's single writing connection, fed through a queue."""

    def __init__(self, path: Path, mmap_mb: int = DEFAULT_MMAP_MB) -> None:
        self._path = path
        self._mmap_mb = mmap_mb
        self._lock_fd: int | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.commits = 0
        self.writes = 0
        self.after_commit: Callable[[], object] | None = None
        """Called after each commit, under the writer lock (the store bumps the person version)."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                conn = connect(self._path, mmap_mb=self._mmap_mb)
                self._lock_fd = os.open(
                    str(self._path) + ".writer-lock", os.O_RDWR | os.O_CREAT, 0o600
                )
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                return
            ready.set()
            try:
                self._serve(conn)
            finally:
                conn.close()
                if self._lock_fd is not None:
                    os.close(self._lock_fd)
                    self._lock_fd = None

        self._thread = threading.Thread(target=run, name="flagstaff-sqlite-writer", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``fn``; the future resolves once its transaction is durably committed."""
        assert self._loop is not None, "writer not started"
        future: asyncio.Future[T] = self._loop.create_future()
        self._queue.put((fn, future))
        return future

    def stop(self) -> None:
        """Finish everything already queued, then stop the thread."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join()
        self._thread = None

    def _serve(self, conn: sqlite3.Connection) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is _STOP:
                return
            batch = [item]
            while True:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stopping = True
                    break
                batch.append(nxt)
            self._commit(conn, batch)

    def _commit(self, conn: sqlite3.Connection, batch: list[tuple[WriteFn, Any]]) -> None:
        assert self._lock_fd is not None and self._loop is not None
        outcomes: list[tuple[Any, Any, BaseException | None]] = []
        try:
            with write_transaction(conn, self._lock_fd, self.after_commit):
                for fn, future in batch:
                    conn.execute("SAVEPOINT item")
                    try:
                        result = fn(conn)
                    except Exception as exc:
                        conn.execute("ROLLBACK TO item")
                        conn.execute("RELEASE item")
                        outcomes.append((future, None, exc))
                    else:
                        conn.execute("RELEASE item")
                        outcomes.append((future, result, None))
        except Exception as exc:
            outcomes = [(future, None, exc) for _, future in batch]
        self.commits += 1
        self.writes += len(batch)
        self._loop.call_soon_threadsafe(_resolve, outcomes)


def _resolve(outcomes: list[tuple[Any, Any, BaseException | None]]) -> None:
    for future, result, exc in outcomes:
        if future.cancelled():
            continue
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
