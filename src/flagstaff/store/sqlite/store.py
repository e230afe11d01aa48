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
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec

from flagstaff.accounts import keys
from flagstaff.accounts.api_keys import key_prefix
from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.ingest.model import Drop, Event
from flagstaff.server.changes import ChangeCounter
from flagstaff.store.base import (
    Conflict,
    Definitions,
    FlagContext,
    Group,
    IngestResult,
    NotFound,
    Page,
    Person,
    PersonalKey,
    Project,
    StoredEvent,
)
from flagstaff.store.rows import (
    COHORT_COLUMNS,
    FLAG_COLUMNS,
    GROUP_COLUMNS,
    PERSONAL_KEY_COLUMNS,
    PROJECT_COLUMNS,
    WARNING_COLUMNS,
    cohort_body,
    cohort_record,
    definitions_record,
    event_record,
    flag_record,
    group_record,
    group_type_change,
    json_text,
    now_iso,
    warning_record,
)
from flagstaff.store.sqlite import event_index
from flagstaff.store.sqlite.accounts import SQLiteAccounts, write_change
from flagstaff.store.sqlite.approvals import ApprovalMethods
from flagstaff.store.sqlite.client import IngestClient
from flagstaff.store.sqlite.enrollment import EnrollmentMixin
from flagstaff.store.sqlite.experiment_reads import ExperimentReadsMixin
from flagstaff.store.sqlite.experiment_store import ExperimentsMixin
from flagstaff.store.sqlite.flag_writes import bump_definitions, write_flag
from flagstaff.store.sqlite.ingest import apply_ingest
from flagstaff.store.sqlite.person_version import FlagContextCache, person_version
from flagstaff.store.sqlite.schema import migrate
from flagstaff.store.sqlite.surveys import SurveyMethods
from flagstaff.store.sqlite.team_store import TeamStoreMixin
from flagstaff.store.sqlite.usage_store import UsageMixin
from flagstaff.store.sqlite.webhooks import WebhookMethods
from flagstaff.store.sqlite.writer import DEFAULT_MMAP_MB, Writer, connect

_decode = msgspec.json.decode


def _now_ms() -> int:
    return int(time.time() * 1000)


def _cohort_in(conn: sqlite3.Connection, cohort_id: int) -> dict[str, Any]:
    row = conn.execute(f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE id = ?", (cohort_id,))
    return cohort_record(row.fetchone())


def _log_cohort(
    conn: sqlite3.Connection,
    project_id: int,
    before: dict[str, Any] | None,
    after: dict[str, Any],
    source: ChangeSource | None,
) -> None:
    write_change(
        conn,
        project_id=project_id,
        scope=Scope.COHORT,
        item_id=after["id"],
        source=source,
        before=before,
        after=after,
        now_ms=_now_ms(),
    )


_bump_definitions = bump_definitions


class SQLiteStore(
    SQLiteAccounts,
    SurveyMethods,
    ExperimentsMixin,
    TeamStoreMixin,
    EnrollmentMixin,
    ExperimentReadsMixin,
    ApprovalMethods,
    WebhookMethods,
    UsageMixin,
):
    """The :class:`~flagstaff.store.base.Store` (and the accounts' store) on an SQLite file."""

    def __init__(
        self, path: Path, ingest_socket: str | None = None, mmap_mb: int = DEFAULT_MMAP_MB
    ) -> None:
        self.path = path
        self.mmap_mb = mmap_mb
        self._writer = Writer(path, mmap_mb)
        self._db: sqlite3.Connection | None = None
        self._ingest_client = IngestClient(ingest_socket) if ingest_socket else None
        self._person_version: ChangeCounter | None = None
        self._contexts: FlagContextCache | None = None

    # lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        import asyncio

        migrate(self.path)
        self._db = connect(self.path, readonly=True, mmap_mb=self.mmap_mb)
        self._person_version = person_version(self.path)
        self._contexts = FlagContextCache(self._person_version)
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

    async def ping(self) -> bool:
        try:
            self.db.execute("SELECT 1").fetchone()
        except sqlite3.Error:
            return False
        return True

    # projects and keys -----------------------------------------------------------------

    async def create_project(self, name: str, api_token: str | None = None) -> Project:
        token = api_token or keys.new_project_token()
        project_uuid = str(uuid.uuid4())
        created = now_iso()

        def write(conn: sqlite3.Connection) -> int:
            try:
                cur = conn.execute(
                    "INSERT INTO projects (uuid, name, api_token, created_at) VALUES (?, ?, ?, ?)",
                    (project_uuid, name, token, created),
                )
            except sqlite3.IntegrityError:
                raise Conflict.project_token_taken() from None
            project_id = int(cur.lastrowid or 0)
            _bump_definitions(conn, project_id)
            return project_id

        project_id = await self._writer.submit(write)
        return Project(project_id, project_uuid, name, token, created)

    async def list_projects(self) -> list[Project]:
        rows = self.db.execute(f"SELECT {PROJECT_COLUMNS} FROM projects ORDER BY id").fetchall()
        return [Project(*row) for row in rows]

    async def get_project(self, project_id: int) -> Project | None:
        row = self.db.execute(
            f"SELECT {PROJECT_COLUMNS} FROM projects WHERE id = ?",
            (project_id,),
        ).fetchone()
        return Project(*row) if row else None

    async def get_project_by_token(self, api_token: str) -> Project | None:
        row = self.db.execute(
            f"SELECT {PROJECT_COLUMNS} FROM projects WHERE api_token = ?",
            (api_token,),
        ).fetchone()
        return Project(*row) if row else None

    async def create_personal_key(
        self, project_id: int, label: str, value: str | None = None
    ) -> tuple[PersonalKey, str]:
        secret = value or keys.new_personal_key()
        created = now_iso()
        mask = keys.mask_key(secret)

        def write(conn: sqlite3.Connection) -> int:
            try:
                cur = conn.execute(
                    "INSERT INTO personal_api_keys (project_id, label, secure_value, mask, "
                    "created_at, prefix, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        project_id, label, keys.hash_key(secret), mask, created,
                        key_prefix(secret), _now_ms(),
                    ),
                )  # fmt: skip
            except sqlite3.IntegrityError:
                raise Conflict.personal_key_taken() from None
            return int(cur.lastrowid or 0)

        key_id = await self._writer.submit(write)
        return PersonalKey(key_id, project_id, label, mask, created), secret

    async def find_personal_key(self, value: str) -> PersonalKey | None:
        row = self.db.execute(
            f"SELECT {PERSONAL_KEY_COLUMNS} FROM personal_api_keys WHERE secure_value = ? "
            "AND revoked_at_ms IS NULL",
            (keys.hash_key(value),),
        ).fetchone()
        return PersonalKey(*row) if row else None

    # feature flags ---------------------------------------------------------------------

    async def list_flags(
        self, project_id: int, limit: int, offset: int, include_deleted: bool = False
    ) -> Page:
        where = "project_id = ?" + ("" if include_deleted else " AND deleted = 0")
        count = self.db.execute(
            f"SELECT COUNT(*) FROM feature_flags WHERE {where}", (project_id,)
        ).fetchone()[0]
        rows = self.db.execute(
            f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE {where} ORDER BY id DESC "
            "LIMIT ? OFFSET ?",
            (project_id, limit, offset),
        ).fetchall()
        return Page(count, [flag_record(r) for r in rows])

    async def get_flag(self, project_id: int, flag_id: int) -> dict[str, Any] | None:
        row = self.db.execute(
            f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE project_id = ? AND id = ?",
            (project_id, flag_id),
        ).fetchone()
        return flag_record(row) if row else None

    async def get_flag_by_key(self, project_id: int, key: str) -> dict[str, Any] | None:
        row = self.db.execute(
            f"SELECT {FLAG_COLUMNS} FROM feature_flags "
            "WHERE project_id = ? AND key = ? AND deleted = 0",
            (project_id, key),
        ).fetchone()
        return flag_record(row) if row else None

    async def create_flag(
        self, project_id: int, data: dict[str, Any], source: ChangeSource | None = None
    ) -> dict[str, Any]:
        now = now_iso()

        def write(conn: sqlite3.Connection) -> int:
            return write_flag(conn, project_id, data, now, source)

        flag_id = await self._writer.submit(write)
        flag = await self.get_flag(project_id, flag_id)
        assert flag is not None
        return flag

    async def update_flag(
        self,
        project_id: int,
        flag_id: int,
        data: dict[str, Any],
        source: ChangeSource | None = None,
    ) -> dict[str, Any]:
        """Replace the flag with ``data``; ``data["version"]`` must be the current version."""
        now = now_iso()

        def write(conn: sqlite3.Connection) -> None:
            write_flag(conn, project_id, data, now, source, flag_id)

        await self._writer.submit(write)
        flag = await self.get_flag(project_id, flag_id)
        assert flag is not None
        return flag

    # cohorts ---------------------------------------------------------------------------

    async def list_cohorts(self, project_id: int, limit: int, offset: int) -> Page:
        count = self.db.execute(
            "SELECT COUNT(*) FROM cohorts WHERE project_id = ? AND deleted = 0", (project_id,)
        ).fetchone()[0]
        rows = self.db.execute(
            f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE project_id = ? AND deleted = 0 "
            "ORDER BY id DESC LIMIT ? OFFSET ?",
            (project_id, limit, offset),
        ).fetchall()
        return Page(count, [cohort_record(r) for r in rows])

    async def get_cohort(self, project_id: int, cohort_id: int) -> dict[str, Any] | None:
        row = self.db.execute(
            f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE project_id = ? AND id = ?",
            (project_id, cohort_id),
        ).fetchone()
        return cohort_record(row) if row else None

    async def create_cohort(
        self, project_id: int, data: dict[str, Any], source: ChangeSource | None = None
    ) -> dict[str, Any]:
        cohort = cohort_body(data)
        now = now_iso()

        def write(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "INSERT INTO cohorts (project_id, is_static, deleted, version, data, created_at, "
                "updated_at) VALUES (?, ?, 0, 1, ?, ?, ?)",
                (project_id, cohort.is_static, json_text(cohort.body), now, now),
            )
            cohort_id = int(cur.lastrowid or 0)
            conn.executemany(
                "INSERT OR IGNORE INTO cohort_members (cohort_id, distinct_id) VALUES (?, ?)",
                [(cohort_id, d) for d in cohort.members],
            )
            _bump_definitions(conn, project_id)
            _log_cohort(conn, project_id, None, _cohort_in(conn, cohort_id), source)
            return cohort_id

        cohort_id = await self._writer.submit(write)
        created = await self.get_cohort(project_id, cohort_id)
        assert created is not None
        return created

    async def update_cohort(
        self,
        project_id: int,
        cohort_id: int,
        data: dict[str, Any],
        source: ChangeSource | None = None,
    ) -> dict[str, Any]:
        body = cohort_body(data).body
        deleted = 1 if data.get("deleted") else 0
        now = now_iso()

        def write(conn: sqlite3.Connection) -> None:
            exists = conn.execute(
                "SELECT 1 FROM cohorts WHERE project_id = ? AND id = ?", (project_id, cohort_id)
            ).fetchone()
            before = _cohort_in(conn, cohort_id) if exists else None
            cur = conn.execute(
                "UPDATE cohorts SET data = ?, deleted = ?, version = version + 1, updated_at = ? "
                "WHERE project_id = ? AND id = ?",
                (json_text(body), deleted, now, project_id, cohort_id),
            )
            if cur.rowcount == 0:
                raise NotFound(f"cohort {cohort_id}")
            _bump_definitions(conn, project_id)
            _log_cohort(conn, project_id, before, _cohort_in(conn, cohort_id), source)

        await self._writer.submit(write)
        cohort = await self.get_cohort(project_id, cohort_id)
        assert cohort is not None
        return cohort

    async def change_static_members(
        self,
        project_id: int,
        cohort_id: int,
        add: list[str],
        remove: list[str],
        source: ChangeSource | None = None,
    ) -> dict[str, Any]:
        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT is_static FROM cohorts WHERE project_id = ? AND id = ? AND deleted = 0",
                (project_id, cohort_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"cohort {cohort_id}")
            if not row[0]:
                raise Conflict.cohort_not_static()
            before = _cohort_in(conn, cohort_id)
            conn.executemany(
                "INSERT OR IGNORE INTO cohort_members (cohort_id, distinct_id) VALUES (?, ?)",
                [(cohort_id, d) for d in add],
            )
            conn.executemany(
                "DELETE FROM cohort_members WHERE cohort_id = ? AND distinct_id = ?",
                [(cohort_id, d) for d in remove],
            )
            conn.execute(
                "UPDATE cohorts SET version = version + 1, updated_at = ? WHERE id = ?",
                (now_iso(), cohort_id),
            )
            _log_cohort(conn, project_id, before, _cohort_in(conn, cohort_id), source)

        await self._writer.submit(write)
        cohort = await self.get_cohort(project_id, cohort_id)
        assert cohort is not None
        return cohort

    async def list_static_members(self, project_id: int, cohort_id: int) -> list[str]:
        rows = self.db.execute(
            "SELECT m.distinct_id FROM cohort_members m JOIN cohorts c ON c.id = m.cohort_id "
            "WHERE c.project_id = ? AND c.id = ? ORDER BY m.distinct_id",
            (project_id, cohort_id),
        ).fetchall()
        return [r[0] for r in rows]

    # what /flags reads -----------------------------------------------------------------

    async def definitions_version(self, project_id: int) -> int:
        row = self.db.execute(
            "SELECT version FROM definitions_version WHERE project_id = ?", (project_id,)
        ).fetchone()
        return int(row[0]) if row else 0

    async def definitions(self, project_id: int) -> Definitions:
        db = self.db
        db.execute("BEGIN")
        try:
            version = await self.definitions_version(project_id)
            flag_rows = db.execute(
                f"SELECT {FLAG_COLUMNS} FROM feature_flags "
                "WHERE project_id = ? AND deleted = 0 ORDER BY key",
                (project_id,),
            ).fetchall()
            cohort_rows = db.execute(
                f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE project_id = ? AND deleted = 0",
                (project_id,),
            ).fetchall()
            type_rows = db.execute(
                "SELECT group_type_index, group_type FROM group_types WHERE project_id = ?",
                (project_id,),
            ).fetchall()
        finally:
            db.execute("COMMIT")
        return definitions_record(version, flag_rows, cohort_rows, type_rows)

    async def flag_context(
        self,
        project_id: int,
        distinct_id: str,
        groups: dict[int, str],
        *,
        overrides: bool = False,
        static_cohorts: bool = False,
    ) -> FlagContext:
        """The stored person, overrides, static cohorts and groups; served from this worker's
        cache while the person version has not moved (read-your-writes, see person_version)."""
        cache = self._contexts
        if cache is None:
            return self._read_flag_context(
                project_id, distinct_id, groups, overrides, static_cohorts
            )
        key = (project_id, distinct_id, overrides, static_cohorts, *groups.items())
        context = cache.get(key)
        if context is None:
            version = cache.version
            context = self._read_flag_context(
                project_id, distinct_id, groups, overrides, static_cohorts
            )
            cache.put(key, context, version)
        return context

    def _read_flag_context(
        self,
        project_id: int,
        distinct_id: str,
        groups: dict[int, str],
        overrides: bool,
        static_cohorts: bool,
    ) -> FlagContext:
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
        if row is not None:
            person_id = row[0]
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
                group_props[str(index)] = _decode(grow[0])
        return FlagContext(properties, group_props, hash_keys, cohort_ids, person_id)

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
        now_ms = int(time.time() * 1000)

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

    async def get_group(
        self, project_id: int, group_type_index: int, group_key: str
    ) -> Group | None:
        row = self.db.execute(
            f"SELECT {GROUP_COLUMNS} "
            "WHERE g.project_id = ? AND g.group_type_index = ? AND g.group_key = ?",
            (project_id, group_type_index, group_key),
        ).fetchone()
        return group_record(row) if row is not None else None

    async def list_group_types(self, project_id: int) -> dict[int, str]:
        return dict(
            self.db.execute(
                "SELECT group_type_index, group_type FROM group_types WHERE project_id = ? "
                "ORDER BY group_type_index",
                (project_id,),
            ).fetchall()
        )

    async def create_group_type(self, project_id: int, index: int, name: str) -> bool:
        """Map group type ``index`` to ``name``; False when it is so already (see
        :func:`~flagstaff.store.rows.group_type_change`)."""

        def write(conn: sqlite3.Connection) -> bool:
            existing = dict(
                conn.execute(
                    "SELECT group_type_index, group_type FROM group_types WHERE project_id = ?",
                    (project_id,),
                ).fetchall()
            )
            if not group_type_change(existing, index, name):
                return False
            conn.execute(
                "INSERT INTO group_types (project_id, group_type_index, group_type) "
                "VALUES (?, ?, ?)",
                (project_id, index, name),
            )
            _bump_definitions(conn, project_id)
            return True

        return bool(await self._writer.submit(write))

    async def list_events(
        self,
        project_id: int,
        *,
        distinct_id: str | None = None,
        event: str | None = None,
        after_ms: int | None = None,
        before_ms: int | None = None,
        cursor: tuple[int, int] | None = None,
        limit: int = 100,
    ) -> list[StoredEvent]:
        """Newest first by timestamp; ``cursor`` is the (timestamp, seq) of the last row seen.

        By distinct id: the events past the index's watermark plus the indexed entries
        (``events_by_distinct_id``), one bucket at a time, newest bucket first, read in one
        snapshot. Each bucket gives at most ``limit`` rows, and once ``limit`` rows are in hand
        only rows newer than the last of them.
        """
        where: list[str] = []
        args: list[Any] = []
        if event is not None:
            where.append("e.event = ?")
            args.append(event)
        if after_ms is not None:
            where.append("e.timestamp_ms > ?")
            args.append(after_ms)
        if before_ms is not None:
            where.append("e.timestamp_ms < ?")
            args.append(before_ms)
        if cursor is not None:
            # the "<=" bounds the index range, the rest of the test then holds per row
            where.append("e.timestamp_ms <= ? AND (e.timestamp_ms < ? OR e.seq < ?)")
            args.extend([cursor[0], cursor[0], cursor[1]])
        if distinct_id is None:
            rows = self._event_rows("", ["e.project_id = ?", *where], [project_id, *args], limit)
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
                    [project_id, mark, distinct_id, *args],
                    limit,
                )
                for bucket in event_index.buckets(db, project_id):
                    newer: list[str] = []
                    floor: list[Any] = []
                    if len(rows) >= limit:
                        rows.sort(key=lambda r: (r[5], r[0]), reverse=True)
                        del rows[limit:]
                        # older buckets hold smaller seqs: on a tied timestamp they come after
                        newer, floor = ["x.timestamp_ms > ?"], [rows[-1][5]]
                    rows += self._event_rows(
                        "JOIN events_by_distinct_id x ON x.seq = e.seq ",
                        ["x.project_id = ?", "x.bucket = ?", "x.distinct_id = ?", *newer, *indexed],
                        [project_id, bucket, distinct_id, *floor, *args],
                        limit,
                        order="x.timestamp_ms DESC, x.seq DESC",
                    )
            finally:
                db.execute("COMMIT")
            rows.sort(key=lambda r: (r[5], r[0]), reverse=True)
            del rows[limit:]
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

    async def list_warnings(self, project_id: int, limit: int, offset: int) -> Page:
        count = self.db.execute(
            "SELECT COUNT(*) FROM ingestion_warnings WHERE project_id = ?", (project_id,)
        ).fetchone()[0]
        rows = self.db.execute(
            f"SELECT {WARNING_COLUMNS} FROM ingestion_warnings "
            "WHERE project_id = ? ORDER BY id DESC LIMIT ? OFFSET ?",
            (project_id, limit, offset),
        ).fetchall()
        return Page(count, [warning_record(r) for r in rows])
