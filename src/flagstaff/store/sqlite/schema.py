"""The SQLite schema: versioned SQL files in ``migrations/``, applied in order at start.

:func:`migrate` creates the database file (with its page size) when missing and applies, in
one ``BEGIN IMMEDIATE`` transaction, every migration not yet recorded in ``schema_migrations``.
Then, once, it turns an older database to ``auto_vacuum=INCREMENTAL`` in place (a ``VACUUM``),
so that the space of deleted events can be handed back (``store/sqlite/retention.py``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from flagstaff.ops import logs
from flagstaff.store import schema_files
from flagstaff.store.rows import now_iso
from flagstaff.store.sqlite.experiments import backfill_exposure_days
from flagstaff.store.sqlite.writer import connect

DATA_STEPS: dict[int, Callable[[sqlite3.Connection], None]] = {130: backfill_exposure_days}
"""Migrations whose data SQL cannot rewrite (msgpack aggregates): run after the migration's
SQL, in the same transaction."""


def migrate(path: Path) -> int:
    """Apply every migration not yet applied; returns the schema version. Safe to rerun."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _create(path)
    conn = connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        version = max(done, default=0)
        for migration in schema_files.pending("flagstaff.store.sqlite", done):
            for statement in _split_sql(migration.sql):
                conn.execute(statement)
            step = DATA_STEPS.get(migration.number)
            if step is not None:
                step(conn)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.number, migration.name, now_iso()),
            )
            version = max(version, migration.number)
        conn.execute("COMMIT")
        _incremental_vacuum(conn)
        return version
    finally:
        conn.close()


PAGE_SIZE = 16384
"""Bytes per page of a new database. Against SQLite's 4 KB default, inserting 600-byte events
(two indexes, WAL, fsync per 2,000-row commit) went from 92k to 104k rows/s here."""


def _create(path: Path) -> None:
    """A new database file: the page size can only be chosen before the first table."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
        conn.execute(f"PRAGMA auto_vacuum={INCREMENTAL}")
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()


INCREMENTAL = 2
"""``PRAGMA auto_vacuum`` value: free pages are kept until ``PRAGMA incremental_vacuum``."""


def _incremental_vacuum(conn: sqlite3.Connection) -> None:
    """Make a database created before auto_vacuum=INCREMENTAL able to shrink: the mode only
    takes effect through a ``VACUUM``, which rewrites the file (it needs about the database's
    size in free space, and time: about a minute per few GB). Done once; a no-op after."""
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == INCREMENTAL:
        return
    logs.logger.warning("converting the SQLite store to incremental vacuum (once): VACUUM")
    conn.execute(f"PRAGMA auto_vacuum={INCREMENTAL}")
    conn.execute("VACUUM")


def _split_sql(script: str) -> list[str]:
    """The script's statements; a trigger's body keeps its own semicolons."""
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    statements: list[str] = []
    pending = ""
    for piece in "\n".join(lines).split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            statement = pending.strip().removesuffix(";").strip()
            if statement:
                statements.append(statement)
            pending = ""
    if pending.strip().removesuffix(";").strip():
        statements.append(pending.strip().removesuffix(";").strip())
    return statements
