"""The experiment and holdout methods of the SQLite store (a mixin of its store class).

Every write bumps the definitions version in its transaction, so the ingest path
(:mod:`flagstaff.store.sqlite.experiments`) and the flag caches see it on their next read.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from flagstaff.activity.records import ChangeSource
from flagstaff.experiments.exposure import ExperimentSpec, ExperimentTotals
from flagstaff.experiments.model import ExperimentDefinition, Holdout
from flagstaff.store.base import Conflict, NotFound, Page
from flagstaff.store.experiment_batch import (
    EXPERIMENT_COLUMNS,
    HOLDOUT_COLUMNS,
    ExperimentRecord,
    HoldoutRecord,
    definition_text,
    experiment_record,
    holdout_filters,
    holdout_record,
    needs_recompute,
    spec_of,
    sum_totals,
    with_holdout,
)
from flagstaff.store.rows import FLAG_COLUMNS, flag_record, now_iso
from flagstaff.store.sqlite.experiments import recompute_experiment
from flagstaff.store.sqlite.flag_writes import write_flag
from flagstaff.store.sqlite.writer import Writer


def _bump(conn: sqlite3.Connection, project_id: int) -> None:
    conn.execute(
        "INSERT INTO definitions_version (project_id, version) VALUES (?, 1) "
        "ON CONFLICT(project_id) DO UPDATE SET version = version + 1",
        (project_id,),
    )


def _write_flag(
    conn: sqlite3.Connection,
    project_id: int,
    flag: dict[str, Any],
    source: ChangeSource | None,
) -> int:
    """Create a new flag (no ``id``) or rewrite the linked one, logged; returns its id."""
    return write_flag(conn, project_id, flag, now_iso(), source, flag.get("id"))


def _experiment_row(conn: sqlite3.Connection, project_id: int, eid: int) -> ExperimentRecord:
    row = conn.execute(
        f"SELECT {EXPERIMENT_COLUMNS} FROM experiments WHERE project_id = ? AND id = ?",
        (project_id, eid),
    ).fetchone()
    if row is None:
        raise NotFound(f"experiment {eid}")
    return experiment_record(row)


def _holdout_row(conn: sqlite3.Connection, project_id: int, hid: int) -> HoldoutRecord:
    row = conn.execute(
        f"SELECT {HOLDOUT_COLUMNS} FROM experiment_holdouts WHERE project_id = ? AND id = ?",
        (project_id, hid),
    ).fetchone()
    if row is None:
        raise NotFound(f"holdout {hid}")
    return holdout_record(row)


class ExperimentsMixin:
    """The :class:`~flagstaff.store.base.Store` experiment methods of ``SQLiteStore``."""

    db: sqlite3.Connection
    _writer: Writer

    async def list_experiments(self, project_id: int, limit: int, offset: int) -> Page:
        count = self.db.execute(
            "SELECT COUNT(*) FROM experiments WHERE project_id = ? AND deleted = 0", (project_id,)
        ).fetchone()[0]
        rows = self.db.execute(
            f"SELECT {EXPERIMENT_COLUMNS} FROM experiments WHERE project_id = ? AND deleted = 0 "
            "ORDER BY id DESC LIMIT ? OFFSET ?",
            (project_id, limit, offset),
        ).fetchall()
        return Page(count, [experiment_record(r) for r in rows])

    async def has_experiments(self) -> bool:
        return (
            self.db.execute("SELECT 1 FROM experiments WHERE deleted = 0 LIMIT 1").fetchone()
            is not None
        )

    async def get_experiment(self, project_id: int, experiment_id: int) -> ExperimentRecord | None:
        try:
            return _experiment_row(self.db, project_id, experiment_id)
        except NotFound:
            return None

    async def create_experiment(
        self,
        project_id: int,
        definition: ExperimentDefinition,
        flag: dict[str, Any],
        *,
        source: ChangeSource | None = None,
    ) -> ExperimentRecord:
        now = now_iso()

        def write(conn: sqlite3.Connection) -> int:
            flag_id = _write_flag(conn, project_id, flag, source)
            cur = conn.execute(
                "INSERT INTO experiments (project_id, feature_flag_id, holdout_id, definition, "
                "archived, deleted, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
                (
                    project_id,
                    flag_id,
                    definition.holdout_id,
                    definition_text(definition),
                    int(definition.archived),
                    now,
                    now,
                ),
            )
            eid = int(cur.lastrowid or 0)
            if definition.start_date is not None:
                recompute_experiment(conn, project_id, ExperimentSpec(eid, definition))
            _bump(conn, project_id)
            return eid

        eid = await self._writer.submit(write)
        return _experiment_row(self.db, project_id, eid)

    async def update_experiment(
        self,
        project_id: int,
        experiment_id: int,
        definition: ExperimentDefinition,
        *,
        deleted: bool = False,
        flag: dict[str, Any] | None = None,
        source: ChangeSource | None = None,
    ) -> ExperimentRecord:
        now = now_iso()

        def write(conn: sqlite3.Connection) -> None:
            old = _experiment_row(conn, project_id, experiment_id)
            if flag is not None:
                _write_flag(conn, project_id, flag, source)
            conn.execute(
                "UPDATE experiments SET holdout_id = ?, definition = ?, archived = ?, "
                "deleted = ?, updated_at = ? WHERE id = ?",
                (
                    definition.holdout_id,
                    definition_text(definition),
                    int(definition.archived),
                    int(deleted),
                    now,
                    experiment_id,
                ),
            )
            if needs_recompute(old, definition, deleted):
                recompute_experiment(conn, project_id, ExperimentSpec(experiment_id, definition))
            _bump(conn, project_id)

        await self._writer.submit(write)
        return _experiment_row(self.db, project_id, experiment_id)

    async def experiment_totals(self, experiment_id: int, fingerprint: str) -> ExperimentTotals:
        rows = self.db.execute(
            "SELECT fingerprint, totals FROM experiment_totals WHERE experiment_id = ?",
            (experiment_id,),
        ).fetchall()
        return sum_totals(rows, fingerprint)

    async def recompute_experiment(self, project_id: int, experiment_id: int) -> int:
        def write(conn: sqlite3.Connection) -> int:
            record = _experiment_row(conn, project_id, experiment_id)
            read = recompute_experiment(conn, project_id, spec_of(record))
            _bump(conn, project_id)  # the ingest writer's remembered states are stale
            return read

        return await self._writer.submit(write)

    async def list_holdouts(self, project_id: int) -> list[HoldoutRecord]:
        rows = self.db.execute(
            f"SELECT {HOLDOUT_COLUMNS} FROM experiment_holdouts WHERE project_id = ? "
            "ORDER BY id DESC",
            (project_id,),
        ).fetchall()
        return [holdout_record(r) for r in rows]

    async def get_holdout(self, project_id: int, holdout_id: int) -> HoldoutRecord | None:
        try:
            return _holdout_row(self.db, project_id, holdout_id)
        except NotFound:
            return None

    async def create_holdout(self, project_id: int, holdout: Holdout) -> HoldoutRecord:
        now = now_iso()

        def write(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "INSERT INTO experiment_holdouts (project_id, name, description, filters, "
                "created_at, updated_at) VALUES (?, ?, ?, '[]', ?, ?)",
                (project_id, holdout.name, holdout.description, now, now),
            )
            hid = int(cur.lastrowid or 0)
            conn.execute(
                "UPDATE experiment_holdouts SET filters = ? WHERE id = ?",
                (holdout_filters(holdout, hid), hid),
            )
            return hid

        hid = await self._writer.submit(write)
        return _holdout_row(self.db, project_id, hid)

    async def update_holdout(
        self,
        project_id: int,
        holdout_id: int,
        holdout: Holdout,
        *,
        source: ChangeSource | None = None,
    ) -> HoldoutRecord:
        now = now_iso()

        def write(conn: sqlite3.Connection) -> None:
            _holdout_row(conn, project_id, holdout_id)
            conn.execute(
                "UPDATE experiment_holdouts SET name = ?, description = ?, filters = ?, "
                "updated_at = ? WHERE id = ?",
                (
                    holdout.name,
                    holdout.description,
                    holdout_filters(holdout, holdout_id),
                    now,
                    holdout_id,
                ),
            )
            for (flag_id,) in conn.execute(
                "SELECT feature_flag_id FROM experiments WHERE project_id = ? AND holdout_id = ? "
                "AND deleted = 0",
                (project_id, holdout_id),
            ).fetchall():
                row = conn.execute(
                    f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE id = ?", (flag_id,)
                ).fetchone()
                _write_flag(
                    conn, project_id, with_holdout(flag_record(row), holdout_id, holdout), source
                )
            _bump(conn, project_id)

        await self._writer.submit(write)
        return _holdout_row(self.db, project_id, holdout_id)

    async def delete_holdout(self, project_id: int, holdout_id: int) -> None:
        def write(conn: sqlite3.Connection) -> None:
            _holdout_row(conn, project_id, holdout_id)
            used = conn.execute(
                "SELECT COUNT(*) FROM experiments WHERE holdout_id = ? AND deleted = 0",
                (holdout_id,),
            ).fetchone()[0]
            if used:
                raise Conflict.holdout_in_use(used)
            conn.execute(
                "UPDATE experiments SET holdout_id = NULL WHERE holdout_id = ?", (holdout_id,)
            )
            conn.execute("DELETE FROM experiment_holdouts WHERE id = ?", (holdout_id,))
            _bump(conn, project_id)

        await self._writer.submit(write)
