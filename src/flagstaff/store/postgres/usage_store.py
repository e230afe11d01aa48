"""The :class:`~flagstaff.store.base.Store` methods of ``PostgresStore`` for flag usage and
property value suggestions."""

from __future__ import annotations

import asyncpg

from flagstaff.store.flag_usage import DailyChecks, ValueChecks
from flagstaff.store.postgres import flag_usage
from flagstaff.store.postgres.sql import pg_text
from flagstaff.store.property_values import SAMPLE_ROWS, ValueCount, value_counts


class UsageMixin:
    pool: asyncpg.Pool

    async def flag_daily_checks(
        self, project_id: int, since_day: int, keys: list[str]
    ) -> list[DailyChecks]:
        return await flag_usage.daily_checks(self.pool, project_id, since_day, keys)

    async def flag_value_checks(
        self, project_id: int, flag_key: str, since_day: int
    ) -> list[ValueChecks]:
        return await flag_usage.value_checks(self.pool, project_id, flag_key, since_day)

    async def flag_last_seen(self, project_id: int, keys: list[str]) -> dict[str, int]:
        return await flag_usage.last_seen(self.pool, project_id, keys)

    async def recompute_flag_usage(self, project_id: int) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            return await flag_usage.recompute(conn, project_id)

    async def property_values(
        self, project_id: int, key: str, group_type_index: int | None
    ) -> list[ValueCount]:
        if group_type_index is None:
            rows = await self.pool.fetch(
                "SELECT v, count(*) FROM (SELECT (properties -> $2)::text AS v FROM persons "
                "WHERE project_id = $1 ORDER BY id DESC LIMIT $3) s "
                "WHERE v IS NOT NULL GROUP BY v",
                project_id,
                pg_text(key),
                SAMPLE_ROWS,
            )
        else:
            rows = await self.pool.fetch(
                "SELECT v, count(*) FROM (SELECT (properties -> $2)::text AS v FROM groups "
                "WHERE project_id = $1 AND group_type_index = $3 LIMIT $4) s "
                "WHERE v IS NOT NULL GROUP BY v",
                project_id,
                pg_text(key),
                group_type_index,
                SAMPLE_ROWS,
            )
        return value_counts((r[0], r[1]) for r in rows)
