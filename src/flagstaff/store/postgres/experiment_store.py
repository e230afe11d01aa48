"""The experiment and holdout methods of the PostgreSQL store (a mixin of its store class).

Every write bumps the definitions version in its transaction, so the ingest path
(:mod:`flagstaff.store.postgres.experiments`) and the flag caches see it on their next read.
"""

from __future__ import annotations

from typing import Any

import asyncpg

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
from flagstaff.store.postgres.experiments import recompute_experiment
from flagstaff.store.postgres.flag_writes import write_flag
from flagstaff.store.postgres.sql import BUMP_DEFINITIONS
from flagstaff.store.rows import FLAG_COLUMNS, flag_record, now_iso


async def _write_flag(
    conn: asyncpg.Connection,
    project_id: int,
    flag: dict[str, Any],
    source: ChangeSource | None,
) -> int:
    """Create a new flag (no ``id``) or rewrite the linked one, logged; returns its id."""
    written = await write_flag(conn, project_id, flag, now_iso(), source, flag.get("id"))
    return int(written["id"])


async def _experiment_row(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: int, eid: int, lock: bool = False
) -> ExperimentRecord:
    row = await conn.fetchrow(
        f"SELECT {EXPERIMENT_COLUMNS} FROM experiments WHERE project_id = $1 AND id = $2"
        + (" FOR UPDATE" if lock else ""),
        project_id,
        eid,
    )
    if row is None:
        raise NotFound(f"experiment {eid}")
    return experiment_record(row)


async def _holdout_row(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: int, hid: int, lock: bool = False
) -> HoldoutRecord:
    row = await conn.fetchrow(
        f"SELECT {HOLDOUT_COLUMNS} FROM experiment_holdouts WHERE project_id = $1 AND id = $2"
        + (" FOR UPDATE" if lock else ""),
        project_id,
        hid,
    )
    if row is None:
        raise NotFound(f"holdout {hid}")
    return holdout_record(row)


async def _bump(conn: asyncpg.Connection, project_id: int) -> None:
    await conn.execute(BUMP_DEFINITIONS, project_id, str(project_id))


class ExperimentsMixin:
    """The :class:`~flagstaff.store.base.Store` experiment methods of ``PostgresStore``."""

    pool: asyncpg.Pool

    async def list_experiments(self, project_id: int, limit: int, offset: int) -> Page:
        count = await self.pool.fetchval(
            "SELECT COUNT(*) FROM experiments WHERE project_id = $1 AND NOT deleted", project_id
        )
        rows = await self.pool.fetch(
            f"SELECT {EXPERIMENT_COLUMNS} FROM experiments WHERE project_id = $1 "
            "AND NOT deleted ORDER BY id DESC LIMIT $2 OFFSET $3",
            project_id,
            limit,
            offset,
        )
        return Page(int(count), [experiment_record(r) for r in rows])

    async def has_experiments(self) -> bool:
        return bool(
            await self.pool.fetchval("SELECT EXISTS (SELECT 1 FROM experiments WHERE NOT deleted)")
        )

    async def get_experiment(self, project_id: int, experiment_id: int) -> ExperimentRecord | None:
        try:
            return await _experiment_row(self.pool, project_id, experiment_id)
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
        async with self.pool.acquire() as conn, conn.transaction():
            flag_id = await _write_flag(conn, project_id, flag, source)
            eid = int(
                await conn.fetchval(
                    "INSERT INTO experiments (project_id, feature_flag_id, holdout_id, "
                    "definition, archived, deleted, created_at, updated_at) "
                    "VALUES ($1, $2, $3, $4, $5, false, $6, $6) RETURNING id",
                    project_id,
                    flag_id,
                    definition.holdout_id,
                    definition_text(definition),
                    definition.archived,
                    now,
                )
            )
            if definition.start_date is not None:
                await recompute_experiment(conn, project_id, ExperimentSpec(eid, definition))
            await _bump(conn, project_id)
            return await _experiment_row(conn, project_id, eid)

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
        async with self.pool.acquire() as conn, conn.transaction():
            old = await _experiment_row(conn, project_id, experiment_id, lock=True)
            if flag is not None:
                await _write_flag(conn, project_id, flag, source)
            await conn.execute(
                "UPDATE experiments SET holdout_id = $1, definition = $2, archived = $3, "
                "deleted = $4, updated_at = $5 WHERE id = $6",
                definition.holdout_id,
                definition_text(definition),
                definition.archived,
                deleted,
                now_iso(),
                experiment_id,
            )
            if needs_recompute(old, definition, deleted):
                await recompute_experiment(
                    conn, project_id, ExperimentSpec(experiment_id, definition)
                )
            await _bump(conn, project_id)
            return await _experiment_row(conn, project_id, experiment_id)

    async def experiment_totals(self, experiment_id: int, fingerprint: str) -> ExperimentTotals:
        rows = await self.pool.fetch(
            "SELECT fingerprint, totals FROM experiment_totals WHERE experiment_id = $1",
            experiment_id,
        )
        return sum_totals(((r[0], r[1]) for r in rows), fingerprint)

    async def recompute_experiment(self, project_id: int, experiment_id: int) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            record = await _experiment_row(conn, project_id, experiment_id, lock=True)
            return await recompute_experiment(conn, project_id, spec_of(record))

    async def list_holdouts(self, project_id: int) -> list[HoldoutRecord]:
        rows = await self.pool.fetch(
            f"SELECT {HOLDOUT_COLUMNS} FROM experiment_holdouts WHERE project_id = $1 "
            "ORDER BY id DESC",
            project_id,
        )
        return [holdout_record(r) for r in rows]

    async def get_holdout(self, project_id: int, holdout_id: int) -> HoldoutRecord | None:
        try:
            return await _holdout_row(self.pool, project_id, holdout_id)
        except NotFound:
            return None

    async def create_holdout(self, project_id: int, holdout: Holdout) -> HoldoutRecord:
        now = now_iso()
        async with self.pool.acquire() as conn, conn.transaction():
            hid = int(
                await conn.fetchval(
                    "INSERT INTO experiment_holdouts (project_id, name, description, filters, "
                    "created_at, updated_at) VALUES ($1, $2, $3, '[]', $4, $4) RETURNING id",
                    project_id,
                    holdout.name,
                    holdout.description,
                    now,
                )
            )
            await conn.execute(
                "UPDATE experiment_holdouts SET filters = $1 WHERE id = $2",
                holdout_filters(holdout, hid),
                hid,
            )
            return await _holdout_row(conn, project_id, hid)

    async def update_holdout(
        self,
        project_id: int,
        holdout_id: int,
        holdout: Holdout,
        *,
        source: ChangeSource | None = None,
    ) -> HoldoutRecord:
        async with self.pool.acquire() as conn, conn.transaction():
            await _holdout_row(conn, project_id, holdout_id, lock=True)
            await conn.execute(
                "UPDATE experiment_holdouts SET name = $1, description = $2, filters = $3, "
                "updated_at = $4 WHERE id = $5",
                holdout.name,
                holdout.description,
                holdout_filters(holdout, holdout_id),
                now_iso(),
                holdout_id,
            )
            rows = await conn.fetch(
                f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE id IN (SELECT feature_flag_id "
                "FROM experiments WHERE project_id = $1 AND holdout_id = $2 AND NOT deleted) "
                "ORDER BY id FOR UPDATE",
                project_id,
                holdout_id,
            )
            for row in rows:
                flag = with_holdout(flag_record(row), holdout_id, holdout)
                await _write_flag(conn, project_id, flag, source)
            await _bump(conn, project_id)
            return await _holdout_row(conn, project_id, holdout_id)

    async def delete_holdout(self, project_id: int, holdout_id: int) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await _holdout_row(conn, project_id, holdout_id, lock=True)
            used = await conn.fetchval(
                "SELECT COUNT(*) FROM experiments WHERE holdout_id = $1 AND NOT deleted",
                holdout_id,
            )
            if used:
                raise Conflict.holdout_in_use(int(used))
            await conn.execute(
                "UPDATE experiments SET holdout_id = NULL WHERE holdout_id = $1", holdout_id
            )
            await conn.execute("DELETE FROM experiment_holdouts WHERE id = $1", holdout_id)
            await _bump(conn, project_id)
