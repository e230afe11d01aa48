"""What the console's team pages read on SQLite: project usage, events per minute, persons in
id order (dynamic cohort counts), groups by key, a static cohort's first members; renaming a
project.

A mixin of :class:`~flagstaff.store.sqlite.store.SQLiteStore`. Counts that may walk many index
entries (usage, events per minute) run in a thread on a connection of their own: SQLite
releases the GIL while it steps, so the worker's event loop keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from flagstaff.common.units import MINUTE_MS
from flagstaff.store.records import Group, PersonRow, Project, Usage
from flagstaff.store.rows import GROUP_COLUMNS, PROJECT_COLUMNS, group_record
from flagstaff.store.sqlite.writer import connect

if TYPE_CHECKING:
    from flagstaff.store.sqlite.writer import Writer

_decode = msgspec.json.decode
T = TypeVar("T")

_CAPPED_COUNT = "SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE project_id = ? LIMIT ?)"
_MINUTE_COUNT = (
    "SELECT COUNT(*) FROM (SELECT 1 FROM events WHERE project_id = ? AND timestamp_ms >= ? "
    "AND timestamp_ms < ? LIMIT ?)"
)


class TeamStoreMixin:
    path: Path
    mmap_mb: int
    _writer: Writer

    @property
    def db(self) -> sqlite3.Connection:  # provided by SQLiteStore
        raise NotImplementedError

    async def _read_in_thread(self, read: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            conn = connect(self.path, readonly=True, mmap_mb=self.mmap_mb)
            try:
                return read(conn)
            finally:
                conn.close()

        return await asyncio.to_thread(run)

    async def rename_project(self, project_id: int, name: str) -> Project | None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE projects SET name = ? WHERE id = ?", (name, project_id))

        await self._writer.submit(write)
        row = self.db.execute(
            f"SELECT {PROJECT_COLUMNS} FROM projects WHERE id = ?", (project_id,)
        ).fetchone()
        return Project(*row) if row else None

    async def project_usage(self, project_id: int, cap: int) -> Usage:
        def read(conn: sqlite3.Connection) -> Usage:
            conn.execute("BEGIN")
            try:
                events = conn.execute(
                    _CAPPED_COUNT.format(table="events"), (project_id, cap)
                ).fetchone()[0]
                persons = conn.execute(
                    _CAPPED_COUNT.format(table="persons"), (project_id, cap)
                ).fetchone()[0]
                flags = conn.execute(
                    "SELECT COUNT(*) FROM feature_flags WHERE project_id = ? AND deleted = 0",
                    (project_id,),
                ).fetchone()[0]
                cohorts = conn.execute(
                    "SELECT COUNT(*) FROM cohorts WHERE project_id = ? AND deleted = 0",
                    (project_id,),
                ).fetchone()[0]
            finally:
                conn.execute("COMMIT")
            return Usage(events, persons, flags, cohorts, cap)

        return await self._read_in_thread(read)

    async def events_per_minute(
        self, project_id: int, start_ms: int, minutes: int, cap: int
    ) -> list[int]:
        def read(conn: sqlite3.Connection) -> list[int]:
            counts = []
            for i in range(minutes):
                low = start_ms + i * MINUTE_MS
                row = conn.execute(_MINUTE_COUNT, (project_id, low, low + MINUTE_MS, cap))
                counts.append(int(row.fetchone()[0]))
            return counts

        return await self._read_in_thread(read)

    async def scan_persons(
        self, project_id: int, after_id: int, limit: int, static_cohorts: bool
    ) -> list[PersonRow]:
        rows = self.db.execute(
            "SELECT id, properties FROM persons WHERE project_id = ? AND id > ? "
            "ORDER BY id LIMIT ?",
            (project_id, after_id, limit),
        ).fetchall()
        members: dict[int, set[int]] = {}
        if static_cohorts and rows:
            marks = ", ".join("?" * len(rows))
            for person_id, cohort_id in self.db.execute(
                "SELECT DISTINCT d.person_id, m.cohort_id FROM person_distinct_ids d "
                "JOIN cohort_members m ON m.distinct_id = d.distinct_id "
                f"WHERE d.project_id = ? AND d.person_id IN ({marks})",
                (project_id, *(r[0] for r in rows)),
            ):
                members.setdefault(person_id, set()).add(cohort_id)
        return [PersonRow(r[0], _decode(r[1]), frozenset(members.get(r[0], ()))) for r in rows]

    async def list_groups(
        self, project_id: int, group_type_index: int, search: str, limit: int, offset: int
    ) -> list[Group]:
        where = "g.project_id = ? AND g.group_type_index = ?"
        args: list[Any] = [project_id, group_type_index]
        if search:
            where += " AND instr(lower(g.group_key), ?) > 0"
            args.append(search.lower())
        rows = self.db.execute(
            f"SELECT {GROUP_COLUMNS} WHERE {where} ORDER BY g.group_key LIMIT ? OFFSET ?",
            (*args, limit, offset),
        ).fetchall()
        return [group_record(r) for r in rows]
