"""Experiment and holdout definitions (a mixin of both stores).

Every write bumps the definitions version in its transaction, so the ingest path and the flag
caches see it on their next read. Rebuilding an experiment's aggregates from stored events is
the engine's own (:meth:`ExperimentMethods.recompute_in`), as the aggregates are a hot path.
"""

from __future__ import annotations

from typing import Protocol

from flagstaff.activity.records import ActivityRecord, ChangeSource
from flagstaff.experiments.exposure import ExperimentSpec, ExperimentTotals
from flagstaff.experiments.model import ExperimentDefinition, Holdout
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
from flagstaff.store.records import Conflict, FlagWrite, NotFound, Page
from flagstaff.store.rows import FLAG_COLUMNS, flag_record, now_iso
from flagstaff.store.sql.activity import write_activity
from flagstaff.store.sql.db import Db, Reader, Row, Tx, by_id, insert_id, page
from flagstaff.store.sql.flag_writes import write_flag

_INSERT_HOLDOUT = (
    "INSERT INTO experiment_holdouts (project_id, name, description, filters, created_at, "
    "updated_at) VALUES ($1, $2, $3, '[]', $4, $4) RETURNING id"
)


async def _write_flag(tx: Tx, project_id: int, flag: FlagWrite, source: ChangeSource | None) -> int:
    """Create a new flag (no ``flag_id``) or rewrite the linked one, logged; returns its id."""
    return (await write_flag(tx, project_id, flag, now_iso(), source)).id


async def _row(
    db: Reader, table: str, columns: str, what: str, project_id: int, row_id: int, lock: bool
) -> Row:
    row = await by_id(db, table, columns, project_id, row_id, lock)
    if row is None:
        raise NotFound(f"{what} {row_id}")
    return row


async def _experiment_row(
    db: Reader, project_id: int, eid: int, lock: bool = False
) -> ExperimentRecord:
    row = await _row(db, "experiments", EXPERIMENT_COLUMNS, "experiment", project_id, eid, lock)
    return experiment_record(row)


async def _holdout_row(db: Reader, project_id: int, hid: int, lock: bool = False) -> HoldoutRecord:
    table = "experiment_holdouts"
    return holdout_record(await _row(db, table, HOLDOUT_COLUMNS, "holdout", project_id, hid, lock))


class ExperimentMethods(Protocol):
    """The :class:`~flagstaff.store.base.Store` experiment methods."""

    sql: Db

    async def recompute_in(self, tx: Tx, project_id: int, spec: ExperimentSpec) -> int:
        """Rebuild one experiment's persons and totals from its stored events, in ``tx``;
        how many events were read (the engine's own)."""
        raise NotImplementedError

    async def list_experiments(self, project_id: int, limit: int, offset: int) -> Page:
        return await page(
            self.sql, "experiments WHERE project_id = $1 AND NOT deleted", EXPERIMENT_COLUMNS,
            "id DESC", (project_id,), limit, offset, experiment_record,
        )  # fmt: skip

    async def has_experiments(self) -> bool:
        """Whether any project has an experiment (not deleted)."""
        found = await self.sql.fetchval("SELECT 1 FROM experiments WHERE NOT deleted LIMIT 1")
        return found is not None

    async def get_experiment(self, project_id: int, experiment_id: int) -> ExperimentRecord | None:
        try:
            return await _experiment_row(self.sql, project_id, experiment_id)
        except NotFound:
            return None

    async def create_experiment(
        self,
        project_id: int,
        definition: ExperimentDefinition,
        flag: FlagWrite,
        *,
        source: ChangeSource | None = None,
    ) -> ExperimentRecord:
        """Insert the experiment and, in the same transaction, its flag: ``flag`` without a
        ``flag_id`` is created, with one it is the linked flag, rewritten. A started experiment's
        aggregates are computed from the stored events."""
        now = now_iso()

        async def write(tx: Tx) -> ExperimentRecord:
            flag_id = await _write_flag(tx, project_id, flag, source)
            eid = await insert_id(
                tx,
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
            if definition.start_date is not None:
                await self.recompute_in(tx, project_id, ExperimentSpec(eid, definition))
            await tx.bump_definitions(project_id)
            return await _experiment_row(tx, project_id, eid)

        return await self.sql.write(write)

    async def update_experiment(
        self,
        project_id: int,
        experiment_id: int,
        definition: ExperimentDefinition,
        *,
        deleted: bool = False,
        flag: FlagWrite | None = None,
        source: ChangeSource | None = None,
    ) -> ExperimentRecord:
        """Replace the definition (and rewrite the linked ``flag`` when given), recomputing the
        aggregates when it launches or what counts changed; NotFound when missing."""

        async def write(tx: Tx) -> ExperimentRecord:
            old = await _experiment_row(tx, project_id, experiment_id, lock=True)
            if flag is not None:
                await _write_flag(tx, project_id, flag, source)
            await tx.execute(
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
                await self.recompute_in(tx, project_id, ExperimentSpec(experiment_id, definition))
            await tx.bump_definitions(project_id)
            return await _experiment_row(tx, project_id, experiment_id)

        return await self.sql.write(write)

    async def guarded_experiments(self) -> list[tuple[int, ExperimentRecord]]:
        """(project id, experiment) of every running experiment with guardrail metrics."""
        rows = await self.sql.fetch(
            f"SELECT project_id, {EXPERIMENT_COLUMNS} FROM experiments "
            "WHERE NOT deleted AND NOT archived "
            """AND CAST(definition AS text) LIKE '%"metrics_guardrail":[{%'"""
        )
        out = []
        for row in rows:
            record = experiment_record(tuple(row)[1:])
            definition = record.definition
            if definition.metrics_guardrail and definition.start_date is not None:
                out.append((int(row[0]), record))
        return out

    async def report_guardrail_breach(
        self,
        project_id: int,
        experiment_id: int,
        metric_uuid: str,
        variant: str,
        record: ActivityRecord,
    ) -> bool:
        """Remember the breach and write its activity record (and webhook deliveries) in one
        transaction; False when it was reported already (by this or another worker)."""

        async def write(tx: Tx) -> bool:
            row = await tx.fetchrow(
                "INSERT INTO experiment_guardrail_breaches (experiment_id, metric_uuid, "
                "variant, reported_at_ms) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING "
                "RETURNING experiment_id",
                experiment_id,
                metric_uuid,
                variant,
                record.created_at_ms,
            )
            if row is None:
                return False
            await write_activity(tx, record)
            return True

        return await self.sql.write(write)

    async def experiment_totals(self, experiment_id: int, fingerprint: str) -> ExperimentTotals:
        """The experiment's totals built for its current spec (``fingerprint``)."""
        rows = await self.sql.fetch(
            "SELECT fingerprint, totals FROM experiment_totals WHERE experiment_id = $1",
            experiment_id,
        )
        return sum_totals(((r[0], r[1]) for r in rows), fingerprint)

    async def experiment_totals_rows(
        self, experiment_ids: list[int]
    ) -> dict[int, list[tuple[str, bytes]]]:
        """Each experiment's stored (fingerprint, totals) rows, one per writer lane, in one read
        (``experiment_batch.sum_totals`` adds those of the current spec)."""
        out: dict[int, list[tuple[str, bytes]]] = {eid: [] for eid in experiment_ids}
        if not experiment_ids:
            return out
        rows = await self.sql.fetch(
            "SELECT experiment_id, fingerprint, totals FROM experiment_totals "
            "WHERE experiment_id = ANY($1::bigint[])",
            experiment_ids,
        )
        for eid, fingerprint, totals in rows:
            out[int(eid)].append((fingerprint, bytes(totals)))
        return out

    async def recompute_experiment(self, project_id: int, experiment_id: int) -> int:
        """Rebuild the aggregates from stored events; returns the events read."""

        async def write(tx: Tx) -> int:
            record = await _experiment_row(tx, project_id, experiment_id, lock=True)
            read = await self.recompute_in(tx, project_id, spec_of(record))
            await tx.bump_definitions(project_id)  # remembered experiment states are stale
            return read

        return await self.sql.write(write)

    async def list_holdouts(self, project_id: int) -> list[HoldoutRecord]:
        rows = await self.sql.fetch(
            f"SELECT {HOLDOUT_COLUMNS} FROM experiment_holdouts WHERE project_id = $1 "
            "ORDER BY id DESC",
            project_id,
        )
        return [holdout_record(r) for r in rows]

    async def get_holdout(self, project_id: int, holdout_id: int) -> HoldoutRecord | None:
        try:
            return await _holdout_row(self.sql, project_id, holdout_id)
        except NotFound:
            return None

    async def create_holdout(self, project_id: int, holdout: Holdout) -> HoldoutRecord:
        now = now_iso()

        async def write(tx: Tx) -> HoldoutRecord:
            hid = await insert_id(
                tx, _INSERT_HOLDOUT, project_id, holdout.name, holdout.description, now
            )
            await tx.execute(
                "UPDATE experiment_holdouts SET filters = $1 WHERE id = $2",
                holdout_filters(holdout, hid),
                hid,
            )
            return await _holdout_row(tx, project_id, hid)

        return await self.sql.write(write)

    async def update_holdout(
        self,
        project_id: int,
        holdout_id: int,
        holdout: Holdout,
        *,
        source: ChangeSource | None = None,
    ) -> HoldoutRecord:
        """Also rewrites ``filters.holdout`` on the flag of every experiment using it."""

        async def write(tx: Tx) -> HoldoutRecord:
            await _holdout_row(tx, project_id, holdout_id, lock=True)
            await tx.execute(
                "UPDATE experiment_holdouts SET name = $1, description = $2, filters = $3, "
                "updated_at = $4 WHERE id = $5",
                holdout.name,
                holdout.description,
                holdout_filters(holdout, holdout_id),
                now_iso(),
                holdout_id,
            )
            rows = await tx.fetch(
                f"SELECT {FLAG_COLUMNS} FROM feature_flags WHERE id IN (SELECT feature_flag_id "
                "FROM experiments WHERE project_id = $1 AND holdout_id = $2 AND NOT deleted) "
                "ORDER BY id FOR UPDATE",
                project_id,
                holdout_id,
            )
            for row in rows:
                current = flag_record(row)
                flag = with_holdout(current, holdout_id, holdout)
                write = FlagWrite(flag=flag, flag_id=current.id, version=current.version)
                await _write_flag(tx, project_id, write, source)
            await tx.bump_definitions(project_id)
            return await _holdout_row(tx, project_id, holdout_id)

        return await self.sql.write(write)

    async def delete_holdout(self, project_id: int, holdout_id: int) -> None:
        """Conflict while an experiment uses it."""

        async def write(tx: Tx) -> None:
            await _holdout_row(tx, project_id, holdout_id, lock=True)
            used = await tx.fetchval(
                "SELECT COUNT(*) FROM experiments WHERE holdout_id = $1 AND NOT deleted",
                holdout_id,
            )
            if used:
                raise Conflict.holdout_in_use(int(used))
            await tx.execute(
                "UPDATE experiments SET holdout_id = NULL WHERE holdout_id = $1", holdout_id
            )
            await tx.execute("DELETE FROM experiment_holdouts WHERE id = $1", holdout_id)
            await tx.bump_definitions(project_id)

        await self.sql.write(write)
