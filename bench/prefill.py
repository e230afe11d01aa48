"""Fill a stopped server's SQLite data dir directly, for the scaling rows of ``bench.all``.

Growing the events table to 50M rows through ``/batch/`` would take most of an hour here, and
loading 1M persons through it minutes. Instead, with the server stopped, rows go straight
into the service's own tables (same schema, same indexes, the events-by-distinct-id table
brought up to date by the service's own ``event_index``), in large transactions:

- events are copies of events the service stored itself (``template_seqs``), under new
  time-ordered uuids and earlier timestamps, so rows have the size and shape of real ones;
- persons are the rows ``$set`` events make (checked against rows the service wrote).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from flagstaff.ingest.persons import person_uuid
from flagstaff.store.sqlite import event_index

DB_NAME = "flagstaff.sqlite3"
PREFILL_UUID_PREFIX = 0x0192
"""Prefilled uuids sort before the benchmark's (``0193...``), as older UUIDv7s would."""
_PREFIX = f"{PREFILL_UUID_PREFIX:04x}0000-"


def _connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-1048576")
    conn.execute("PRAGMA temp_store=MEMORY")
    return conn


def event_count(db: Path) -> int:
    """Rows in the events table (its largest sequence number: events are never deleted)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
    finally:
        conn.close()


def prefill_events(
    db: Path, rows: int, template: tuple[int, int], *, chunk: int = 1_000_000
) -> dict[str, float]:
    """Append ``rows`` copies of the stored events with sequence numbers in ``template``.

    Each copy gets a new uuid (``0192...``, increasing, never used before in this database)
    and a timestamp before the benchmark's, then the distinct-id index is brought up to the
    new top in the same transaction. Returns rows/s and the database's bytes per row.
    """
    lo, hi = template
    conn = _connect(db)
    started = time.perf_counter()
    try:
        size = hi - lo + 1
        done = 0
        last = conn.execute(
            "SELECT max(uuid) FROM events WHERE project_id = 1 AND uuid < ?",
            (f"{PREFILL_UUID_PREFIX + 1:04x}",),
        ).fetchone()[0]
        serial = int(last[-12:], 16) + 1 if last and last.startswith(_PREFIX) else 0
        base_ts = int(
            conn.execute(
                "SELECT min(timestamp_ms) FROM events WHERE seq BETWEEN ? AND ?", (lo, hi)
            ).fetchone()[0]
        )
        while done < rows:
            conn.execute("BEGIN IMMEDIATE")
            in_chunk = 0
            while in_chunk < chunk and done < rows:
                take = min(size, rows - done, chunk - in_chunk)
                # n numbers the prefilled rows of this database: unique uuids, older timestamps
                conn.execute(
                    "INSERT INTO events (project_id, uuid, event, distinct_id, timestamp_ms, "
                    "received_ms, historical, properties) "
                    "SELECT project_id, printf('%04x0000-0000-7000-8000-%012x', ?, n), "
                    "event, distinct_id, "
                    "? - 100000000 + n / 100, ? - 100000000 + n / 100, historical, properties "
                    "FROM (SELECT *, ? + seq - ? AS n FROM events WHERE seq BETWEEN ? AND ?)",
                    (PREFILL_UUID_PREFIX, base_ts, base_ts, serial, lo, lo, lo + take - 1),
                )
                serial += take
                done += take
                in_chunk += take
            while event_index.index_events(conn, limit=chunk * 2):
                pass
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        elapsed = time.perf_counter() - started
        total = int(conn.execute("SELECT max(seq) FROM events").fetchone()[0])
    finally:
        conn.close()
    return {"rows_per_s": rows / elapsed, "bytes_per_row": db.stat().st_size / total}


PERSON_COLUMNS = (
    "id",
    "project_id",
    "uuid",
    "properties",
    "is_identified",
    "created_at_ms",
    "version",
)
"""The ``persons`` columns of each row :func:`person_rows` builds, in order."""


def person_rows(
    people: Iterable[tuple[str, dict[str, Any], dict[str, str]]],
    first_id: int,
    created_at_ms: int,
    project_id: int = 1,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The ``persons`` and ``person_distinct_ids`` rows a ``$set`` of each person writes."""
    encode = msgspec.json.encode
    persons, ids = [], []
    for number, (distinct_id, properties, _) in enumerate(people):
        pid = first_id + number
        persons.append(
            (
                pid,
                project_id,
                person_uuid(project_id, distinct_id),
                encode(properties),
                0,
                created_at_ms,
                0,
            )
        )
        ids.append((project_id, distinct_id, pid))
    return persons, ids


def prefill_persons(
    db: Path, people: list[tuple[str, dict[str, Any], dict[str, str]]], *, chunk: int = 200_000
) -> float:
    """Insert ``people`` (none stored yet) as persons; returns persons/s."""
    conn = _connect(db)
    started = time.perf_counter()
    try:
        first_id, created = conn.execute(
            "SELECT coalesce(max(id), 0) + 1, coalesce(max(created_at_ms), 0) FROM persons"
        ).fetchone()
        for start in range(0, len(people), chunk):
            persons, ids = person_rows(people[start : start + chunk], first_id + start, created)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                f"INSERT INTO persons ({', '.join(PERSON_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                persons,
            )
            conn.executemany(
                "INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) "
                "VALUES (?, ?, ?)",
                ids,
            )
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return len(people) / (time.perf_counter() - started)


def stored_persons(db: Path, distinct_ids: list[str]) -> list[tuple[Any, ...]]:
    """The stored rows of ``distinct_ids`` (for checking prefilled rows against real ones)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(distinct_ids))
        return conn.execute(
            "SELECT d.distinct_id, p.project_id, p.uuid, p.properties, p.is_identified, "
            "p.version FROM person_distinct_ids d JOIN persons p ON p.id = d.person_id "
            f"WHERE d.distinct_id IN ({marks}) ORDER BY d.distinct_id",
            distinct_ids,
        ).fetchall()
    finally:
        conn.close()
