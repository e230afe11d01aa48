"""Event retention on PostgreSQL: the setting, and the pass one node at a time runs.

Every node's workers call :meth:`RetentionMixin.retention_pass` now and then
(``server/retention.py``); the first to take the advisory lock does the work, the others
return at once. A pass makes the coming months' partitions (and past months' for events that
landed in the default partition), drops every partition whose events have all expired
(``store/postgres/partitions.py``: the space goes back to the file system at once), then
deletes the remaining expired events, their uuids and the expired ingestion warnings of each
project with a retention, :data:`STEP_ROWS` per transaction with a pause between, up to
:data:`MAX_STEPS` steps (the next pass goes on).
"""

from __future__ import annotations

import asyncio

import asyncpg

from flagstaff.store.postgres import partitions
from flagstaff.store.retention import RetentionPolicy, RetentionProgress

RETENTION_LOCK = 0x666C6167_72657465  # "flagrete"
STEP_ROWS = 2000
MAX_STEPS = 50
STEP_PAUSE_SECONDS = 0.02
"""Between steps: ingestion's transactions go first."""

_DELETE_EVENTS = (
    "DELETE FROM events WHERE project_id = $1 AND timestamp_ms < $2 AND seq = ANY(ARRAY("
    "SELECT seq FROM events WHERE project_id = $1 AND timestamp_ms < $2 LIMIT $3))"
)
_DELETE_UUIDS = (
    "DELETE FROM event_uuids WHERE project_id = $1 AND uuid = ANY(ARRAY("
    "SELECT uuid FROM event_uuids WHERE project_id = $1 AND timestamp_ms < $2 LIMIT $3))"
)
_DELETE_WARNINGS = (
    "DELETE FROM ingestion_warnings WHERE id = ANY(ARRAY(SELECT id FROM ingestion_warnings "
    "WHERE project_id = $1 AND created_at_ms < $2 LIMIT $3))"
)


def _count(status: str) -> int:
    return int(status.rsplit(" ", 1)[1])


class RetentionMixin:
    """The setting and the pass, for :class:`~flagstaff.store.postgres.store.PostgresStore`."""

    @property
    def pool(self) -> asyncpg.Pool:  # provided by PostgresStore
        raise NotImplementedError

    async def get_event_retention(self, project_id: int) -> int | None:
        return await self.pool.fetchval(
            "SELECT event_retention_days FROM projects WHERE id = $1", project_id
        )

    async def set_event_retention(self, project_id: int, days: int | None) -> bool:
        """Set (None: forever); False when the project does not exist."""
        status = await self.pool.execute(
            "UPDATE projects SET event_retention_days = $2 WHERE id = $1", project_id, days
        )
        return _count(status) > 0

    async def retention_pass(self, now_ms: int) -> RetentionProgress | None:
        """One pass, if no other node is running one (None then)."""
        async with self.pool.acquire() as conn:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", RETENTION_LOCK):
                return None
            try:
                return await _pass(conn, now_ms)
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", RETENTION_LOCK)


async def _pass(conn: asyncpg.Connection, now_ms: int) -> RetentionProgress:
    await partitions.ensure(conn, now_ms)
    rows = await conn.fetch("SELECT id, event_retention_days FROM projects")
    cutoffs: dict[int, int | None] = {}
    policies = []
    for project_id, days in rows:
        if days is None:
            cutoffs[project_id] = None
        else:
            policy = RetentionPolicy(project_id, days)
            policies.append(policy)
            cutoffs[project_id] = policy.cutoff_ms(now_ms)
    progress = RetentionProgress()
    if not policies:
        return progress
    progress.partitions_dropped = await partitions.drop_expired(conn, cutoffs)
    steps = 0
    for policy in policies:
        cutoff = policy.cutoff_ms(now_ms)
        for statement in (_DELETE_EVENTS, _DELETE_UUIDS, _DELETE_WARNINGS):
            while True:
                if steps >= MAX_STEPS:
                    progress.done = False
                    return progress
                removed = _count(
                    await conn.execute(statement, policy.project_id, cutoff, STEP_ROWS)
                )
                steps += 1
                if statement is _DELETE_EVENTS:
                    progress.events += removed
                elif statement is _DELETE_WARNINGS:
                    progress.warnings += removed
                if removed < STEP_ROWS:
                    break
                await asyncio.sleep(STEP_PAUSE_SECONDS)
    return progress
