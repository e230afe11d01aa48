"""Event retention on SQLite: the setting, and the bounded steps the ingest writer runs.

The ingest writer process (``store/sqlite/ingestd.py``) is the only one that deletes: it is
already the single writer of events, so deletion never races ingestion for the write lock from
another process. Every ``FLAGSTAFF_RETENTION_CHECK_SECONDS`` (15 s by default) it reads the
projects' settings; while any project has expired events it deletes :data:`STEP_ROWS` of
them per transaction (with their events-by-distinct-id entries and that project's expired
ingestion warnings), between ingestion batches and, under load, in at most
:data:`BUSY_SHARE` of the writer's time; then it gives the freed pages back to the file
system with ``PRAGMA incremental_vacuum`` in steps of :data:`VACUUM_PAGES`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable

from flagstaff.common import clock
from flagstaff.ops import logs
from flagstaff.store.retention import RetentionPolicy, RetentionProgress
from flagstaff.store.sqlite.event_index import BUCKET_BITS
from flagstaff.store.sqlite.writer import Writer, write_transaction

STEP_ROWS = 200
"""Events deleted per transaction. A step runs after an ingestion commit, before that batch
is answered: 200 took 17-40 ms here with their events-by-distinct-id entries (one leaf page
each, mostly), 500 took 24-91 ms."""
VACUUM_PAGES = 128
"""Free pages handed back per incremental vacuum transaction (2 MB of 16 KB pages; each page
moved from the end of the file takes about 0.25 ms here)."""
BUSY_SHARE = 0.1
"""Under load, retention takes at most this share of the writer's time: after a step that took
d seconds, the next waits d * (1 / BUSY_SHARE - 1). Idle, steps follow at once. With 0.2,
``bench.retention_load`` saw /batch/ p99 at 2.3x; with 0.1, 1.95x (1.2x with retention off:
the second run's own drift)."""
BUSY_GAP_SECONDS = 0.05
"""And under load, at least this long between steps."""
CHECK_SECONDS_ENV = "FLAGSTAFF_RETENTION_CHECK_SECONDS"
DEFAULT_CHECK_SECONDS = 15.0


class RetentionMixin:
    """The setting, for :class:`~flagstaff.store.sqlite.store.SQLiteStore`."""

    _writer: Writer

    @property
    def db(self) -> sqlite3.Connection:  # provided by SQLiteStore
        raise NotImplementedError

    async def get_event_retention(self, project_id: int) -> int | None:
        row = self.db.execute(
            "SELECT event_retention_days FROM projects WHERE id = ?", (project_id,)
        ).fetchone()
        return None if row is None else row[0]

    async def set_event_retention(self, project_id: int, days: int | None) -> bool:
        """Set (None: forever); False when the project does not exist."""

        def write(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "UPDATE projects SET event_retention_days = ? WHERE id = ?", (days, project_id)
            )
            return cur.rowcount

        return bool(await self._writer.submit(write))

    async def retention_pass(self, now_ms: int) -> RetentionProgress | None:
        """Nothing here: the ingest writer process deletes (see the module's docstring)."""
        return None


def policies(conn: sqlite3.Connection) -> list[RetentionPolicy]:
    rows = conn.execute(
        "SELECT id, event_retention_days FROM projects WHERE event_retention_days IS NOT NULL"
    ).fetchall()
    return [RetentionPolicy(int(pid), int(days)) for pid, days in rows]


def delete_step(
    conn: sqlite3.Connection, policy: RetentionPolicy, now_ms: int, limit: int = STEP_ROWS
) -> RetentionProgress:
    """Delete up to ``limit`` expired events of one project and its expired warnings; call
    inside a write transaction. ``done`` is False when more may remain."""
    cutoff = policy.cutoff_ms(now_ms)
    gone = conn.execute(
        "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE project_id = ? "
        "AND timestamp_ms < ? LIMIT ?) RETURNING seq, distinct_id, timestamp_ms",
        (policy.project_id, cutoff, limit),
    ).fetchall()
    if gone:
        # Entries indexed before migration 0043 are in bucket 0 (see event_index).
        conn.executemany(
            "DELETE FROM events_by_distinct_id WHERE project_id = ? AND bucket IN (0, ?) "
            "AND distinct_id = ? AND timestamp_ms = ? AND seq = ?",
            [
                (policy.project_id, seq >> BUCKET_BITS, distinct_id, ts, seq)
                for seq, distinct_id, ts in gone
            ],
        )
    warnings = conn.execute(
        "DELETE FROM ingestion_warnings WHERE id IN (SELECT id FROM ingestion_warnings "
        "WHERE project_id = ? AND created_at_ms < ? LIMIT ?)",
        (policy.project_id, cutoff, limit),
    ).rowcount
    return RetentionProgress(
        events=len(gone), warnings=warnings, done=len(gone) < limit and warnings < limit
    )


def vacuum_step(conn: sqlite3.Connection, pages: int = VACUUM_PAGES) -> int:
    """Give up to ``pages`` free pages back to the file system; how many were free before."""
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    # Python's sqlite3 steps the pragma once, which frees one page: so one page a call.
    for _ in range(min(free, pages)):
        conn.execute("PRAGMA incremental_vacuum(1)")
    return free


def check_seconds() -> float:
    raw = os.environ.get(CHECK_SECONDS_ENV)
    try:
        return max(0.05, float(raw)) if raw else DEFAULT_CHECK_SECONDS
    except ValueError:
        return DEFAULT_CHECK_SECONDS


class RetentionRunner:
    """The ingest writer's side: when a step is due, and running one.

    Settings are read every ``interval`` seconds, so a change applies within that time (and
    expired events are looked for that often, which is far more often than hourly). Steps run
    one at a time on the writer's connection, between ingestion batches.
    """

    def __init__(
        self, interval: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = check_seconds() if interval is None else interval
        self._clock = clock
        self._next_check = 0.0
        self._next_busy_step = 0.0
        self._policies: list[RetentionPolicy] = []
        self.pending = False
        """Expired rows (or free pages) may remain: keep stepping."""
        self.total = RetentionProgress()

    def seconds_to_check(self) -> float:
        return max(0.0, self._next_check - self._clock())

    def due(self, busy: bool) -> bool:
        now = self._clock()
        if now >= self._next_check:
            return True
        return self.pending and (not busy or now >= self._next_busy_step)

    def step(self, conn: sqlite3.Connection, lock_fd: int) -> int:
        """One bounded transaction of deletion or vacuum; rows or pages it handled."""
        started = self._clock()
        try:
            return self._step(conn, lock_fd, started)
        finally:
            took = self._clock() - started
            self._next_busy_step = (
                started + took + max(BUSY_GAP_SECONDS, took * (1 / BUSY_SHARE - 1))
            )

    def _step(self, conn: sqlite3.Connection, lock_fd: int, now: float) -> int:
        if now >= self._next_check:
            self._next_check = now + self.interval
            self._policies = policies(conn)
            self.pending = True
        if not self.pending:
            return 0
        now_ms = clock.now_ms()
        handled = 0
        done = True
        with write_transaction(conn, lock_fd) if self._policies else contextlib.nullcontext():
            for policy in self._policies:
                progress = delete_step(conn, policy, now_ms)
                self.total.events += progress.events
                self.total.warnings += progress.warnings
                handled += progress.events + progress.warnings
                done = done and progress.done
                if handled >= STEP_ROWS:
                    done = False
                    break
        if handled or not done:
            return handled
        if not int(conn.execute("PRAGMA freelist_count").fetchone()[0]):
            self.pending = False
            self._report()
            return 0
        with write_transaction(conn, lock_fd):
            free = vacuum_step(conn)
        if free <= VACUUM_PAGES:
            self.pending = False
            self._report()
            if free:
                # The file shrinks when the checkpoint copies the vacuumed pages back.
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        return free

    def _report(self) -> None:
        total = self.total
        if total.events or total.warnings:
            logs.log(
                logging.INFO,
                "retention removed expired events",
                events=total.events,
                ingestion_warnings=total.warnings,
            )
            self.total = RetentionProgress()
