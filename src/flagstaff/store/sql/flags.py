"""Feature flags and cohorts as the management API changes them (a mixin of both stores);
what ``/flags`` reads of them is the engines' own."""

from __future__ import annotations

from typing import Protocol

import msgspec

from flagstaff.activity.records import ChangeSource, Scope
from flagstaff.common import clock
from flagstaff.flags.records import FeatureFlag, FlagDefinition
from flagstaff.store.records import (
    Cohort,
    CohortDefinition,
    Conflict,
    FlagWrite,
    NotFound,
    Page,
)
from flagstaff.store.rows import (
    COHORT_COLUMNS,
    FLAG_COLUMNS,
    cohort_body,
    flag_record,
    now_iso,
    stored_cohort,
)
from flagstaff.store.sql.activity import write_change
from flagstaff.store.sql.db import Db, Tx, by_id, insert_id, json_arg, page
from flagstaff.store.sql.flag_writes import write_flag

_MEMBERS = (
    "SELECT m.distinct_id FROM cohort_members m JOIN cohorts c ON c.id = m.cohort_id "
    "WHERE c.project_id = $1 AND c.id = $2 ORDER BY m.distinct_id"
)


async def _cohort_in(tx: Tx, cohort_id: int) -> Cohort:
    row = await tx.fetchrow(f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE id = $1", cohort_id)
    if row is None:
        raise LookupError(f"cohort {cohort_id} is not in this transaction")
    return stored_cohort(row)


async def _cohort_change(
    tx: Tx, project_id: int, source: ChangeSource | None, before: Cohort | None, after: Cohort
) -> None:
    """The activity record of a cohort's change (its JSON shapes compared)."""
    await write_change(
        tx,
        project_id,
        Scope.COHORT,
        after.id,
        source,
        None if before is None else msgspec.to_builtins(before),
        msgspec.to_builtins(after),
        clock.now_ms(),
    )


class FlagMethods(Protocol):
    sql: Db

    async def add_members_in(
        self, tx: Tx, project_id: int, cohort_id: int, members: list[str]
    ) -> None:
        """Add distinct ids to a static cohort in ``tx`` (the tables differ per engine)."""
        raise NotImplementedError

    # feature flags -------------------------------------------------------------------------

    async def list_flags(
        self, project_id: int, limit: int, offset: int, include_deleted: bool = False
    ) -> Page:
        where = "project_id = $1" + ("" if include_deleted else " AND NOT deleted")
        return await page(
            self.sql, f"feature_flags WHERE {where}", FLAG_COLUMNS, "id DESC", (project_id,),
            limit, offset, flag_record,
        )  # fmt: skip

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None:
        row = await by_id(self.sql, "feature_flags", FLAG_COLUMNS, project_id, flag_id)
        return flag_record(row) if row else None

    async def get_flag_by_key(self, project_id: int, key: str) -> FeatureFlag | None:
        row = await self.sql.fetchrow(
            f"SELECT {FLAG_COLUMNS} FROM feature_flags "
            "WHERE project_id = $1 AND key = $2 AND NOT deleted",
            project_id,
            key,
        )
        return flag_record(row) if row else None

    async def create_flag(
        self,
        project_id: int,
        flag: FlagDefinition,
        source: ChangeSource | None = None,
        created_at: str | None = None,
    ) -> FeatureFlag:
        """Create the flag (``created_at``: kept from an export, else now)."""
        write = FlagWrite(flag=flag, created_at=created_at)
        now = now_iso()
        return await self.sql.write(lambda tx: write_flag(tx, project_id, write, now, source))

    async def update_flag(
        self,
        project_id: int,
        flag_id: int,
        flag: FlagDefinition,
        version: int | None,
        source: ChangeSource | None = None,
    ) -> FeatureFlag:
        """Replace the flag with ``flag``, if it is still at ``version`` (None: unchecked)."""
        write = FlagWrite(flag=flag, flag_id=flag_id, version=version)
        now = now_iso()
        return await self.sql.write(lambda tx: write_flag(tx, project_id, write, now, source))

    # cohorts -------------------------------------------------------------------------------

    async def list_cohorts(self, project_id: int, limit: int, offset: int) -> Page:
        return await page(
            self.sql, "cohorts WHERE project_id = $1 AND NOT deleted", COHORT_COLUMNS,
            "id DESC", (project_id,), limit, offset, stored_cohort,
        )  # fmt: skip

    async def get_cohort(self, project_id: int, cohort_id: int) -> Cohort | None:
        row = await by_id(self.sql, "cohorts", COHORT_COLUMNS, project_id, cohort_id)
        return stored_cohort(row) if row else None

    async def create_cohort(
        self, project_id: int, cohort: CohortDefinition, source: ChangeSource | None = None
    ) -> Cohort:
        body = cohort_body(cohort)
        now = now_iso()

        async def write(tx: Tx) -> Cohort:
            cohort_id = await insert_id(
                tx,
                "INSERT INTO cohorts (project_id, is_static, deleted, version, data, "
                "created_at, updated_at) VALUES ($1, $2, false, 1, $3, $4, $5) RETURNING id",
                project_id,
                cohort.is_static,
                json_arg(body),
                now,
                now,
            )
            await self.add_members_in(tx, project_id, cohort_id, list(cohort.distinct_ids))
            await tx.bump_definitions(project_id)
            after = await _cohort_in(tx, cohort_id)
            await _cohort_change(tx, project_id, source, None, after)
            return after

        return await self.sql.write(write)

    async def update_cohort(
        self,
        project_id: int,
        cohort_id: int,
        cohort: CohortDefinition,
        source: ChangeSource | None = None,
    ) -> Cohort:
        """Write ``cohort``'s body and ``deleted`` (its kind and members stay)."""
        body = cohort_body(cohort)
        deleted = cohort.deleted

        async def write(tx: Tx) -> Cohort:
            exists = await tx.fetchval(
                "SELECT 1 FROM cohorts WHERE project_id = $1 AND id = $2 FOR UPDATE",
                project_id,
                cohort_id,
            )
            before = await _cohort_in(tx, cohort_id) if exists else None
            changed = await tx.execute(
                "UPDATE cohorts SET data = $1, deleted = $2, version = version + 1, "
                "updated_at = $3 WHERE project_id = $4 AND id = $5",
                json_arg(body),
                deleted,
                now_iso(),
                project_id,
                cohort_id,
            )
            if changed == 0:
                raise NotFound(f"cohort {cohort_id}")
            await tx.bump_definitions(project_id)
            after = await _cohort_in(tx, cohort_id)
            await _cohort_change(tx, project_id, source, before, after)
            return after

        return await self.sql.write(write)

    async def change_static_members(
        self,
        project_id: int,
        cohort_id: int,
        add: list[str],
        remove: list[str],
        source: ChangeSource | None = None,
    ) -> Cohort:
        async def write(tx: Tx) -> Cohort:
            is_static = await tx.fetchval(
                "SELECT is_static FROM cohorts WHERE project_id = $1 AND id = $2 "
                "AND NOT deleted FOR UPDATE",
                project_id,
                cohort_id,
            )
            if is_static is None:
                raise NotFound(f"cohort {cohort_id}")
            if not is_static:
                raise Conflict.cohort_not_static()
            before = await _cohort_in(tx, cohort_id)
            await self.add_members_in(tx, project_id, cohort_id, add)
            if remove:
                await tx.execute(
                    "DELETE FROM cohort_members WHERE cohort_id = $1 "
                    "AND distinct_id = ANY($2::text[])",
                    cohort_id,
                    remove,
                )
            await tx.execute(
                "UPDATE cohorts SET version = version + 1, updated_at = $1 WHERE id = $2",
                now_iso(),
                cohort_id,
            )
            after = await _cohort_in(tx, cohort_id)
            await _cohort_change(tx, project_id, source, before, after)
            return after

        return await self.sql.write(write)

    async def list_static_members(self, project_id: int, cohort_id: int) -> list[str]:
        return [r[0] for r in await self.sql.fetch(_MEMBERS, project_id, cohort_id)]

    async def static_member_sample(self, project_id: int, cohort_id: int, limit: int) -> list[str]:
        """The first ``limit`` distinct ids of a static cohort, in order."""
        rows = await self.sql.fetch(_MEMBERS + " LIMIT $3", project_id, cohort_id, limit)
        return [r[0] for r in rows]
