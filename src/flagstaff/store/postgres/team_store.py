"""What the console's team pages read on PostgreSQL: project usage, events per minute, persons
in id order (dynamic cohort counts), groups by key, a static cohort's first members; renaming a
project. A mixin of :class:`~flagstaff.store.postgres.store.PostgresStore`."""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec

from flagstaff.common.units import MINUTE_MS
from flagstaff.store.postgres.sql import pg_text
from flagstaff.store.records import Group, PersonRow, Project, Usage
from flagstaff.store.rows import GROUP_COLUMNS, PROJECT_COLUMNS, group_record

_decode = msgspec.json.decode

_USAGE = (
    "SELECT (SELECT count(*) FROM (SELECT 1 FROM events WHERE project_id = $1 LIMIT $2) e), "
    "(SELECT count(*) FROM (SELECT 1 FROM persons WHERE project_id = $1 LIMIT $2) p), "
    "(SELECT count(*) FROM feature_flags WHERE project_id = $1 AND NOT deleted), "
    "(SELECT count(*) FROM cohorts WHERE project_id = $1 AND NOT deleted)"
)
# One capped count per minute, each an index range of events_timestamp (project, timestamp).
_PER_MINUTE = (
    "SELECT (SELECT count(*) FROM (SELECT 1 FROM events WHERE project_id = $1 "
    "AND timestamp_ms >= m AND timestamp_ms < m + 60000 LIMIT $4) x) "
    "FROM generate_series($2::bigint, $3::bigint, 60000) AS m ORDER BY m"
)


class TeamStoreMixin:
    @property
    def pool(self) -> asyncpg.Pool:  # provided by PostgresStore
        raise NotImplementedError

    async def rename_project(self, project_id: int, name: str) -> Project | None:
        row = await self.pool.fetchrow(
            f"UPDATE projects SET name = $2 WHERE id = $1 RETURNING {PROJECT_COLUMNS}",
            project_id,
            pg_text(name),
        )
        return Project(*row) if row else None

    async def project_usage(self, project_id: int, cap: int) -> Usage:
        events, persons, flags, cohorts = await self.pool.fetchrow(_USAGE, project_id, cap)
        return Usage(int(events), int(persons), int(flags), int(cohorts), cap)

    async def events_per_minute(
        self, project_id: int, start_ms: int, minutes: int, cap: int
    ) -> list[int]:
        last = start_ms + (minutes - 1) * MINUTE_MS
        rows = await self.pool.fetch(_PER_MINUTE, project_id, start_ms, last, cap)
        return [int(r[0]) for r in rows]

    async def scan_persons(
        self, project_id: int, after_id: int, limit: int, static_cohorts: bool
    ) -> list[PersonRow]:
        rows = await self.pool.fetch(
            "SELECT p.id, p.properties, CASE WHEN $4 THEN ARRAY(SELECT DISTINCT m.cohort_id "
            "FROM person_distinct_ids d JOIN cohort_members m ON m.project_id = d.project_id "
            "AND m.distinct_id = d.distinct_id WHERE d.person_id = p.id) END "
            "FROM persons p WHERE p.project_id = $1 AND p.id > $2 ORDER BY p.id LIMIT $3",
            project_id,
            after_id,
            limit,
            static_cohorts,
        )
        return [PersonRow(r[0], _decode(r[1]), frozenset(r[2] or ())) for r in rows]

    async def list_groups(
        self, project_id: int, group_type_index: int, search: str, limit: int, offset: int
    ) -> list[Group]:
        where = "g.project_id = $1 AND g.group_type_index = $2"
        args: list[Any] = [project_id, group_type_index]
        if search:
            args.append(pg_text(search.lower()))
            where += f" AND strpos(lower(g.group_key), ${len(args)}) > 0"
        args += [limit, offset]
        rows = await self.pool.fetch(
            f"SELECT {GROUP_COLUMNS} WHERE {where} ORDER BY g.group_key "
            f"LIMIT ${len(args) - 1} OFFSET ${len(args)}",
            *args,
        )
        return [group_record(r) for r in rows]
