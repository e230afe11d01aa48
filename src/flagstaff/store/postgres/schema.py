"""The PostgreSQL schema: versioned SQL files in ``migrations/``, applied in order at start.

Nodes may start together: :func:`migrate` holds a session advisory lock while it works, so one
applies what is missing and the others then find it done.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg

from flagstaff.store import schema_files
from flagstaff.store.postgres.experiments import backfill_exposure_days

DATA_STEPS: dict[int, Callable[[asyncpg.Connection], Awaitable[None]]] = {
    130: backfill_exposure_days
}
"""Migrations whose data SQL cannot rewrite (msgpack aggregates): run after the migration's
SQL, in the same transaction."""

MIGRATION_LOCK = 0x666C6167_6D696772  # "flagmigr"


async def migrate(conn: asyncpg.Connection) -> int:
    """Apply every migration not yet applied; returns the schema version. Safe to rerun."""
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r[0] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        version = max(done, default=0)
        for migration in schema_files.pending("flagstaff.store.postgres", done):
            async with conn.transaction():
                await conn.execute(migration.sql)
                step = DATA_STEPS.get(migration.number)
                if step is not None:
                    await step(conn)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.number,
                    migration.name,
                )
            version = max(version, migration.number)
        return version
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
