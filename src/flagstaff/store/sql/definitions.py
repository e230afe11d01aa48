"""What the flag caches read when a project's definitions change (its flags, cohorts and group
types in one consistent read), and a group by key (a mixin of both stores)."""

from __future__ import annotations

from typing import Protocol

from flagstaff.store.records import Definitions, Group
from flagstaff.store.rows import (
    COHORT_COLUMNS,
    FLAG_COLUMNS,
    GROUP_COLUMNS,
    definitions_record,
    group_record,
)
from flagstaff.store.sql.db import Db, Reader

_VERSION = "SELECT version FROM definitions_version WHERE project_id = $1"


class DefinitionReads(Protocol):
    sql: Db

    async def definitions_version(self, project_id: int) -> int:
        version = await self.sql.fetchval(_VERSION, project_id)
        return int(version) if version is not None else 0

    async def definitions(self, project_id: int) -> Definitions:
        async def read(db: Reader) -> Definitions:
            version = await db.fetchval(_VERSION, project_id)
            flag_rows = await db.fetch(
                f"SELECT {FLAG_COLUMNS} FROM feature_flags "
                "WHERE project_id = $1 AND NOT deleted ORDER BY key",
                project_id,
            )
            cohort_rows = await db.fetch(
                f"SELECT {COHORT_COLUMNS} FROM cohorts WHERE project_id = $1 AND NOT deleted",
                project_id,
            )
            type_rows = await db.fetch(
                "SELECT group_type_index, group_type FROM group_types WHERE project_id = $1",
                project_id,
            )
            return definitions_record(version, flag_rows, cohort_rows, type_rows)

        return await self.sql.snapshot(read)

    async def get_group(
        self, project_id: int, group_type_index: int, group_key: str
    ) -> Group | None:
        row = await self.sql.fetchrow(
            f"SELECT {GROUP_COLUMNS} "
            "WHERE g.project_id = $1 AND g.group_type_index = $2 AND g.group_key = $3",
            project_id,
            group_type_index,
            group_key,
        )
        return group_record(row) if row is not None else None
