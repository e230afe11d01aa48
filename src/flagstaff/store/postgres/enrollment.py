"""Persons enrolled in an early access feature: those whose person property
``$feature_enrollment/<flag key>`` is true (posthog-js sets it on opt-in). A mixin of
:class:`~flagstaff.store.postgres.store.PostgresStore`. A read scans the project's persons:
there is no index on a property."""

from __future__ import annotations

import json

import asyncpg

from flagstaff.store.postgres.sql import pg_text
from flagstaff.store.records import Enrolled

_WHERE = (  # the key's text first: a string search is cheaper than parsing each JSON
    "FROM persons p WHERE p.project_id = $1 AND strpos(p.properties::text, $3) > 0 "
    "AND (p.properties ->> $2) = 'true'"
)


class EnrollmentMixin:
    @property
    def pool(self) -> asyncpg.Pool:  # provided by PostgresStore
        raise NotImplementedError

    async def enrolled_persons(self, project_id: int, property_key: str, limit: int) -> Enrolled:
        key = pg_text(property_key)
        needle = pg_text(json.dumps(property_key))
        count = await self.pool.fetchval(f"SELECT count(*) {_WHERE}", project_id, key, needle)
        rows = await self.pool.fetch(
            "SELECT (SELECT min(d.distinct_id) FROM person_distinct_ids d "
            f"WHERE d.project_id = p.project_id AND d.person_id = p.id) {_WHERE} "
            "ORDER BY p.id DESC LIMIT $4",
            project_id,
            key,
            needle,
            limit,
        )
        return Enrolled(int(count), [str(r[0]) for r in rows if r[0] is not None])
