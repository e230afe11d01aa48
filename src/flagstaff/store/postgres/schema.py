"""The PostgreSQL schema: versioned SQL files in ``migrations/``, applied in order at start.

Nodes may start together: :func:`migrate` holds a session advisory lock while it works, so one
applies what is missing and the others then find it done.
"""

from __future__ import annotations

from importlib import resources

import asyncpg

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
        folder = resources.files("flagstaff.store.postgres") / "migrations"
        scripts = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
        version = max(done, default=0)
        for name in scripts:
            number = int(name.split("_", 1)[0])
            if number in done:
                continue
            async with conn.transaction():
                await conn.execute((folder / name).read_text())
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", number, name
                )
            version = max(version, number)
        return version
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
