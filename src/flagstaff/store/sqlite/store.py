"""The embedded default store: one SQLite file in WAL mode under the data directory.

Reads run on this process's read-only connection in the event loop's thread (indexed point
look-ups, cheaper than a hop to a thread pool). Writes go to this process's
:class:`~flagstaff.store.sqlite.writer.Writer` thread, which group-commits them. Several worker
processes may share the file: each writing connection takes the data dir's writer lock
(``<db>.writer-lock``, an flock) around its ``BEGIN IMMEDIATE`` transaction, so writers take
turns the moment the holder commits instead of polling SQLite's busy handler.

Under ``flagstaff serve`` ingestion does not use this process's writer: batches go to the
ingest writer process (:mod:`~flagstaff.store.sqlite.ingestd`) through
:class:`~flagstaff.store.sqlite.client.IngestClient`. Used directly (tests, tools), a store
applies them itself (:func:`~flagstaff.store.sqlite.ingest.apply_ingest`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec

from flagstaff.common import clock
from flagstaff.experiments.exposure import ExperimentSpec
from flagstaff.ingest.model import Drop, Event
from flagstaff.store.changes import ChangeCounter
from flagstaff.store.records import EventQuery, FlagContext, IngestResult, Person, StoredEvent
from flagstaff.store.rows import event_record
from flagstaff.store.sql.db import Db, Tx
from flagstaff.store.sql.methods import ManagementMethods
from flagstaff.store.sqlite import event_index
from flagstaff.store.sqlite.client import IngestClient
from flagstaff.store.sqlite.dialect import SQLiteConnection, SQLiteDb
from flagstaff.store.sqlite.enrollment import EnrollmentMixin
from flagstaff.store.sqlite.experiments import recompute_experiment
from flagstaff.store.sqlite.ingest import apply_ingest
from flagstaff.store.sqlite.person_version import (
    DEFAULT_CONTEXT_CACHE_MB,
    FlagContextCache,
    context_size,
    person_version,
)
from flagstaff.store.sqlite.retention import RetentionMixin
from flagstaff.store.sqlite.schema import migrate
from flagstaff.store.sqlite.team_store import TeamStoreMixin
from flagstaff.store.sqlite.usage_store import UsageMixin
from flagstaff.store.sqlite.writer import DEFAULT_MMAP_MB, Writer, connect

_decode = msgspec.json.decode


def _conn(tx: Tx) -> sqlite3.Connection:
    """The writer's connection behind a shared write's transaction."""
    assert isinstance(tx, SQLiteConnection)
    return tx.conn


class SQLiteStore(ManagementMethods, TeamStoreMixin, UsageMixin, RetentionMixin, EnrollmentMixin):
    """The :class:`~flagstaff.store.base.Store` (and the accounts' store) on an SQLite file."""

    def __init__(
        self,
        path: Path,
        ingest_socket: str | None = None,
        mmap_mb: int = DEFAULT_MMAP_MB,
        context_cache_mb: int = DEFAULT_CONTEXT_CACHE_MB,
    ) -> None:
        self.path = path
        self.mmap_mb = mmap_mb
        self.context_cache_mb = context_cache_mb
        self._writer = Writer(path, mmap_mb)
        self._db: sqlite3.Connection | None = None
        self._ingest_client = IngestClient(ingest_socket) if ingest_socket else None
        self._person_version: ChangeCounter | None = None
        self._contexts: FlagContextCache | None = None
        self.sql: Db = SQLiteDb(lambda: self.db, lambda: self._writer)

    @property
    def ingest_client(self) -> IngestClient | None:
        """The connection to the ingest writer process, when events go through one."""
        return self._ingest_client

    # lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        import asyncio

        migrate(self.path)
        self._db = connect(self.path, readonly=True, mmap_mb=self.mmap_mb)
        self._person_version = person_version(self.path)
        self._contexts = FlagContextCache(self._person_version, self.context_cache_mb * 1024 * 1024)
        # Any write of this process may touch persons, overrides or cohort members.
        self._writer.after_commit = self._person_version.bump
        self._writer.start(asyncio.get_running_loop())

    async def close(self) -> None:
        if self._ingest_client is not None:
            await self._ingest_client.close()
        self._writer.stop()
        if self._db is not None:
            self._db.close()
            self._db = None
        self._contexts = None
        if self._person_version is not None:
            self._person_version.close()
            self._person_version = None

    async def listen_definitions(self, callback: Callable[[int | None], None]) -> None:
        """Nothing to listen to: every worker reads the same file and polls its version."""
        return None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("store is not open")
        return self._db

    # what the shared management code leaves to the engine ----------------------------

    async def recompute_in(self, tx: Tx, project_id: int, spec: ExperimentSpec) -> int:
        return recompute_experiment(_conn(tx), project_id, spec)

    async def add_members_in(
        self, tx: Tx, project_id: int, cohort_id: int, members: list[str]
    ) -> None:
        _conn(tx).executemany(
            "INSERT OR IGNORE INTO cohort_members (cohort_id, distinct_id) VALUES (?, ?)",
            [(cohort_id, d) for d in members],
        )

    # what /flags reads -----------------------------------------------------------------

    def answers_version(self) -> int | None:
        version = self._person_version
        return None if version is None else version.cell.value

    async def flag_context(
        self, project_id: int, distinct_id: str, groups: dict[int, str], *,
        overrides: bool = False, static_cohorts: bool = False,
    ) -> FlagContext:  # fmt: skip
        """The stored person, overrides, static cohorts and groups; served from this worker's
        cache while the person version has not moved (read-your-writes, see person_version)."""
        cache = self._contexts
        if cache is None:
            return self._read_flag_context(
                project_id, distinct_id, groups, overrides, static_cohorts
            )[0]
        key = (project_id, distinct_id, overrides, static_cohorts, *groups.items())
        context = cache.get(key)
        if context is None:
            version = cache.version
            context, json_bytes = self._read_flag_context(
                project_id, distinct_id, groups, overrides, static_cohorts
            )
            cache.put(key, context, version, context_size(json_bytes))
        return context

    def _read_flag_context(
        self,
        project_id: int,
        distinct_id: str,
        groups: dict[int, str],
        overrides: bool,
        static_cohorts: bool,
    ) -> tuple[FlagContext, int]:
        """The context, and the bytes of stored JSON it was decoded from (its size)."""
        db = self.db
        row = db.execute(
            "SELECT p.id, p.properties FROM person_distinct_ids d JOIN persons p "
            "ON p.id = d.person_id WHERE d.project_id = ? AND d.distinct_id = ?",
            (project_id, distinct_id),
        ).fetchone()
        person_id: int | None = None
        properties: dict[str, Any] = {}
        hash_keys: dict[str, str] = {}
        cohort_ids: frozenset[int] = frozenset()
        json_bytes = 0
        if row is not None:
            person_id = row[0]
            json_bytes = len(row[1])
            properties = _decode(row[1])
            if overrides:
                hash_keys = dict(
                    db.execute(
                        "SELECT feature_flag_key, hash_key FROM hash_key_overrides "
                        "WHERE project_id = ? AND person_id = ?",
                        (project_id, person_id),
                    ).fetchall()
                )
        if static_cohorts:
            if person_id is None:
                sql = "SELECT cohort_id FROM cohort_members WHERE distinct_id = ?"
                args: tuple[Any, ...] = (distinct_id,)
            else:
                sql = (
                    "SELECT DISTINCT m.cohort_id FROM person_distinct_ids d "
                    "JOIN cohort_members m ON m.distinct_id = d.distinct_id "
                    "WHERE d.project_id = ? AND d.person_id = ?"
                )
                args = (project_id, person_id)
            cohort_ids = frozenset(r[0] for r in db.execute(sql, args))
        group_props: dict[str, dict[str, Any]] = {}
        for index, key in groups.items():
            grow = db.execute(
                "SELECT properties FROM groups WHERE project_id = ? AND group_type_index = ? "
                "AND group_key = ?",
                (project_id, index, key),
            ).fetchone()
            if grow is not None:
                json_bytes += len(grow[0])
                group_props[str(index)] = _decode(grow[0])
        context = FlagContext(properties, group_props, hash_keys, cohort_ids, person_id)
        return context, json_bytes

    async def add_hash_key_overrides(
        self, project_id: int, distinct_id: str, hash_key: str, flag_keys: list[str]
    ) -> None:
        """Store ``hash_key`` for each flag the person has no override for yet."""

        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT person_id FROM person_distinct_ids WHERE project_id = ? "
                "AND distinct_id = ?",
                (project_id, distinct_id),
            ).fetchone()
            if row is None:
                return
            conn.executemany(
                "INSERT OR IGNORE INTO hash_key_overrides (project_id, person_id, "
                "feature_flag_key, hash_key) VALUES (?, ?, ?, ?)",
                [(project_id, row[0], key, hash_key) for key in flag_keys],
            )

        await self._writer.submit(write)

    # ingestion -------------------------------------------------------------------------

    async def ingest(self, project_id: int, events: list[Event], drops: list[Drop]) -> IngestResult:
        """Store events, person and group changes and warnings in one durable transaction.

        Under ``flagstaff serve`` the batch goes to the ingest writer process; used directly
        (tests, tools), it is applied by this process's writer thread.
        """
        if self._ingest_client is not None:
            return await self._ingest_client.ingest(project_id, events, drops)
        now_ms = clock.now_ms()

        def write(conn: sqlite3.Connection) -> IngestResult:
            result = apply_ingest(conn, project_id, events, drops, now_ms)
            event_index.index_events(conn)
            return result

        return await self._writer.submit(write)

    # read views ------------------------------------------------------------------------

    async def get_person(self, project_id: int, distinct_id: str) -> Person | None:
        row = self.db.execute(
            "SELECT p.id, p.uuid, p.properties, p.is_identified, p.created_at_ms "
            "FROM person_distinct_ids d JOIN persons p ON p.id = d.person_id "
            "WHERE d.project_id = ? AND d.distinct_id = ?",
            (project_id, distinct_id),
        ).fetchone()
        if row is None:
            return None
        ids = [
            r[0]
            for r in self.db.execute(
                "SELECT distinct_id FROM person_distinct_ids WHERE person_id = ? "
                "ORDER BY distinct_id",
                (row[0],),
            )
        ]
        return Person(row[0], row[1], _decode(row[2]), bool(row[3]), row[4], ids)

    async def list_events(self, project_id: int, query: EventQuery) -> list[StoredEvent]:
        """Newest first by timestamp (see :class:`~flagstaff.store.records.EventQuery`).

        By distinct id: the events past the index's watermark plus the indexed entries
        (``events_by_distinct_id``), one bucket at a time, newest bucket first, read in one
        snapshot. Each bucket gives at most ``limit`` rows, and once ``limit`` rows are in hand
        only rows newer than the last of them.
        """
        where: list[str] = []
        args: list[Any] = []
        if query.event is not None:
            where.append("e.event = ?")
            args.append(query.event)
        if query.after_ms is not None:
            where.append("e.timestamp_ms > ?")
            args.append(query.after_ms)
        if query.before_ms is not None:
            where.append("e.timestamp_ms < ?")
            args.append(query.before_ms)
        if query.cursor is not None:
            # the "<=" bounds the index range, the rest of the test then holds per row
            where.append("e.timestamp_ms <= ? AND (e.timestamp_ms < ? OR e.seq < ?)")
            args.extend([query.cursor[0], query.cursor[0], query.cursor[1]])
        if query.distinct_id is None:
            rows = self._event_rows(
                "", ["e.project_id = ?", *where], [project_id, *args], query.limit
            )
        else:
            indexed = [
                w.replace("e.timestamp_ms", "x.timestamp_ms").replace("e.seq", "x.seq")
                for w in where
            ]
            db = self.db
            db.execute("BEGIN")
            try:
                mark = event_index.watermark(db)
                # "+": a seq range past the watermark, not the project's whole timestamp index
                rows = self._event_rows(
                    "",
                    ["+e.project_id = ?", "e.seq > ?", "e.distinct_id = ?", *where],
                    [project_id, mark, query.distinct_id, *args],
                    query.limit,
                )
                for bucket in event_index.buckets(db, project_id):
                    newer: list[str] = []
                    floor: list[Any] = []
                    if len(rows) >= query.limit:
                        rows.sort(key=lambda r: (r[5], r[0]), reverse=True)
                        del rows[query.limit :]
                        # older buckets hold smaller seqs: on a tied timestamp they come after
                        newer, floor = ["x.timestamp_ms > ?"], [rows[-1][5]]
                    rows += self._event_rows(
                        "JOIN events_by_distinct_id x ON x.seq = e.seq ",
                        ["x.project_id = ?", "x.bucket = ?", "x.distinct_id = ?", *newer, *indexed],
                        [project_id, bucket, query.distinct_id, *floor, *args],
                        query.limit,
                        order="x.timestamp_ms DESC, x.seq DESC",
                    )
            finally:
                db.execute("COMMIT")
            rows.sort(key=lambda r: (r[5], r[0]), reverse=True)
            del rows[query.limit :]
        return [event_record(r) for r in rows]

    def _event_rows(
        self,
        join: str,
        where: list[str],
        args: list[Any],
        limit: int,
        order: str = "e.timestamp_ms DESC, e.seq DESC",
    ) -> list[Any]:
        return self.db.execute(
            "SELECT e.seq, e.uuid, e.event, e.distinct_id, e.properties, e.timestamp_ms, "
            f"e.received_ms, e.historical, p.id, p.uuid FROM events e {join}"
            "LEFT JOIN person_distinct_ids d ON d.project_id = e.project_id "
            "AND d.distinct_id = e.distinct_id LEFT JOIN persons p ON p.id = d.person_id "
            f"WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ?",
            (*args, limit),
        ).fetchall()

    async def iter_events(
        self, project_id: int, since_ms: int | None, batch: int = 1000
    ) -> AsyncIterator[list[StoredEvent]]:
        """All events with a timestamp at or after ``since_ms``, oldest first, in batches."""
        last_seq = 0
        since = since_ms if since_ms is not None else -(2**62)
        while True:
            rows = self.db.execute(
                "SELECT e.seq, e.uuid, e.event, e.distinct_id, e.properties, e.timestamp_ms, "
                "e.received_ms, e.historical, p.id, p.uuid FROM events e "
                "LEFT JOIN person_distinct_ids d ON d.project_id = e.project_id "
                "AND d.distinct_id = e.distinct_id LEFT JOIN persons p ON p.id = d.person_id "
                "WHERE e.project_id = ? AND e.seq > ? AND e.timestamp_ms >= ? "
                "ORDER BY e.seq LIMIT ?",
                (project_id, last_seq, since, batch),
            ).fetchall()
            if not rows:
                return
            last_seq = rows[-1][0]
            yield [event_record(r) for r in rows]
