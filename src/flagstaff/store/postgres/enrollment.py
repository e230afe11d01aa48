"""Persons enrolled in an early access feature: those whose person property
``$feature_enrollment/<flag key>`` is true (posthog-js sets it on opt-in), kept one row per
flag key and person in ``person_enrollments`` by ingestion, and counted per flag key in
``enrollment_counts`` by that table's trigger (migration 0131). A mixin of
:class:`~flagstaff.store.postgres.store.PostgresStore`: counts are one row per feature, the
newest enrolled persons a walk of the primary key; never the persons' properties."""

from __future__ import annotations

import asyncpg

from flagstaff.store.postgres.sql import pg_text
from flagstaff.store.records import Enrolled


class EnrollmentMixin:
    @property
    def pool(self) -> asyncpg.Pool:  # provided by PostgresStore
        raise NotImplementedError

    async def enrolled_persons(self, project_id: int, flag_key: str, limit: int) -> Enrolled:
        key = pg_text(flag_key)
        count = await self.pool.fetchval(
            "SELECT persons FROM enrollment_counts WHERE project_id = $1 AND flag_key = $2",
            project_id,
            key,
        )
        rows = await self.pool.fetch(
            "SELECT (SELECT min(d.distinct_id) FROM person_distinct_ids d "
            "WHERE d.project_id = e.project_id AND d.person_id = e.person_id) "
            "FROM person_enrollments e WHERE e.project_id = $1 AND e.flag_key = $2 "
            "ORDER BY e.person_id DESC LIMIT $3",
            project_id,
            key,
            limit,
        )
        return Enrolled(int(count or 0), [str(r[0]) for r in rows if r[0] is not None])

    async def enrollment_counts(self, project_id: int, flag_keys: list[str]) -> dict[str, int]:
        out = dict.fromkeys(flag_keys, 0)
        if not flag_keys:
            return out
        rows = await self.pool.fetch(
            "SELECT flag_key, persons FROM enrollment_counts WHERE project_id = $1 "
            "AND flag_key = ANY($2::text[])",
            project_id,
            sorted({pg_text(k) for k in flag_keys}),
        )
        by_key = {str(k): int(n) for k, n in rows}
        return {key: by_key.get(pg_text(key), 0) for key in out}
