"""Existing stores migrate in place: a SQLite store made before retention is converted to
incremental vacuum with its events; a PostgreSQL events table with rows of many months (and
one older than the partitions reach) becomes partitioned with every row, its uuids still
unique and its sequence going on."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path

import asyncpg

from flagstaff.store import schema_files
from flagstaff.store.postgres.ingest import _INSERT_EVENTS
from flagstaff.store.postgres.schema import migrate as migrate_pg
from flagstaff.store.sqlite.schema import INCREMENTAL
from flagstaff.store.sqlite.schema import migrate as migrate_sqlite
from tests import pg

RETENTION_MIGRATIONS = {120, 121}
DAY_MS = 86_400_000
NOW = 1_795_000_000_000  # 2026-11-18


def _before(package: str) -> list[schema_files.Migration]:
    return schema_files.pending(package, RETENTION_MIGRATIONS)


def test_sqlite_store_before_retention_is_converted(tmp_path: Path) -> None:
    path = tmp_path / "flagstaff.sqlite3"
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA page_size=16384")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at TEXT NOT NULL)"
    )
    for migration in _before("flagstaff.store.sqlite"):
        conn.executescript(migration.sql)
        conn.execute(
            "INSERT INTO schema_migrations VALUES (?, ?, '')", (migration.number, migration.name)
        )
    conn.executemany(
        "INSERT INTO events (project_id, uuid, event, distinct_id, timestamp_ms, received_ms, "
        "properties) VALUES (1, ?, 'e', 'd', ?, ?, '{}')",
        [(str(uuid.uuid4()), NOW - i * DAY_MS, NOW) for i in range(500)],
    )
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    conn.close()
    assert migrate_sqlite(path) >= 120
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == INCREMENTAL
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 500
    assert conn.execute("SELECT event_retention_days FROM projects").fetchall() == []
    conn.close()


async def _postgres_upgrade(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in _before("flagstaff.store.postgres"):
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                migration.number,
                migration.name,
            )
        ages = [i * 9 for i in range(40)] + [30 * 365]  # a year of months, and 30 years back
        ids = [str(uuid.uuid4()) for _ in ages]
        await conn.executemany(
            "INSERT INTO events (project_id, uuid, event, distinct_id, timestamp_ms, "
            "received_ms, properties) VALUES (1, $1, 'e', 'd', $2, $3, '{}')",
            [(u, NOW - age * DAY_MS, NOW) for u, age in zip(ids, ages, strict=True)],
        )
        top = await conn.fetchval("SELECT max(seq) FROM events")
        await migrate_pg(conn)
        assert await conn.fetchval("SELECT count(*) FROM events") == len(ages)
        assert await conn.fetchval("SELECT count(*) FROM event_uuids") == len(ages)
        assert await conn.fetchval("SELECT count(*) FROM events_default") == 1  # 30 years old
        parts = await conn.fetchval(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass"
        )
        months = await conn.fetchval(
            "SELECT count(DISTINCT date_trunc('month', to_timestamp(timestamp_ms / 1000.0))) "
            "FROM events WHERE timestamp_ms > $1",
            NOW - 3650 * DAY_MS,
        )
        # A partition per month with events, the coming months, the default one; no empty
        # partition for the 29 years between.
        assert months + 1 <= parts <= months + 4
        fresh = str(uuid.uuid4())
        args = (1, [ids[0], fresh, fresh], ["e"] * 3, ["d"] * 3, [NOW] * 3, [NOW] * 3,
                [False] * 3, ["{}"] * 3)  # fmt: skip
        # A known uuid and a repeated one are stored once: uniqueness through event_uuids.
        assert await conn.execute(_INSERT_EVENTS, *args) == "INSERT 0 1"
        assert await conn.fetchval("SELECT seq FROM events WHERE uuid = $1", fresh) > top
    finally:
        await conn.close()


def test_postgres_events_become_partitioned_in_place() -> None:
    asyncio.run(_postgres_upgrade(pg.new_database()))
