"""SQLite's insert floor for event rows: what each events-table index and the page size cost.

Run: ``python -m bench.sqlite_insert [--rows 200000] [--batch 2000]``

Inserts ~600-byte event rows with time-ordered uuids into a fresh database per case (WAL,
``synchronous=FULL``, one transaction per batch), the way the ingest writer does, with no HTTP
and no rules. The ``deferred`` case indexes events by distinct id in bulk every 50,000 rows,
as ``store/sqlite/event_index.py`` does.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

_PROPERTIES = (
    b'{"$current_url":"https://shop.example.com/p/1","$pathname":"/p/1","$host":"shop.example'
    b'.com","$browser":"Chrome","$browser_version":131,"$os":"Mac OS X","$os_version":"15.1.0",'
    b'"$device_type":"Desktop","$screen_height":1117,"$screen_width":1728,"$viewport_height":'
    b'980,"$viewport_width":1728,"$lib":"web","$lib_version":"1.449.2","$insert_id":"1xk",'
    b'"$referrer":"$direct","$session_id":"0193a1b2-c3d4-7e5f-8a9b-000000000001","$window_id":'
    b'"0193a1b2-c3d4-7e5f-8a9b-c0d1e2f3a4b5","title":"Product 1","$ip":"127.0.0.1"}'
)
_TABLE = (
    "CREATE TABLE events (seq INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, "
    "uuid TEXT NOT NULL, event TEXT NOT NULL, distinct_id TEXT NOT NULL, "
    "timestamp_ms INTEGER NOT NULL, received_ms INTEGER NOT NULL, historical INTEGER NOT NULL, "
    "properties TEXT NOT NULL);"
)
_UUID = "CREATE UNIQUE INDEX events_uuid ON events(project_id, uuid);"
_TIME = "CREATE INDEX events_timestamp ON events(project_id, timestamp_ms);"
_DISTINCT = "CREATE INDEX events_distinct_id ON events(project_id, distinct_id, timestamp_ms);"
_BY_DISTINCT = (
    "CREATE TABLE events_by_distinct_id (project_id INTEGER, distinct_id TEXT, "
    "timestamp_ms INTEGER, seq INTEGER, PRIMARY KEY (project_id, distinct_id, timestamp_ms, seq))"
    " WITHOUT ROWID;"
)
_DEFER_EVERY = 50_000


def _row(i: int) -> tuple[object, ...]:
    ts = 1_763_805_600_000 + i // 50
    uuid = f"01930007-0000-7000-8007-{i:012x}"
    return (None, 1, uuid, "$pageview", f"user-{i * 7919 % 10_000}", ts, ts, 0, _PROPERTIES)


def _run(
    schema: str, rows: int, batch: int, page_size: int, deferred: bool, auto_vacuum: int = 0
) -> float:
    with tempfile.TemporaryDirectory() as folder:
        conn = sqlite3.connect(str(Path(folder) / "bench.sqlite3"), isolation_level=None)
        conn.execute(f"PRAGMA page_size={page_size}")
        conn.execute(f"PRAGMA auto_vacuum={auto_vacuum}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA cache_size=-262144")
        conn.execute(f"PRAGMA wal_autocheckpoint={64 * 1024 * 1024 // page_size}")
        conn.executescript(schema)
        insert = "INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        indexed = 0
        started = time.perf_counter()
        for start in range(0, rows, batch):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(insert, [_row(i) for i in range(start, start + batch)])
            conn.execute("COMMIT")
            if deferred and start + batch - indexed >= _DEFER_EVERY:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "INSERT INTO events_by_distinct_id SELECT project_id, distinct_id, "
                    "timestamp_ms, seq FROM events WHERE seq > ? ORDER BY 1, 2, 3, 4",
                    (indexed,),
                )
                conn.execute("COMMIT")
                indexed = start + batch
        elapsed = time.perf_counter() - started
        conn.close()
    return rows / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=2_000)
    args = parser.parse_args()
    cases: list[tuple[str, Callable[[], float]]] = []
    for label, schema, deferred in (
        ("uuid + distinct_id + timestamp indexes", _TABLE + _UUID + _DISTINCT + _TIME, False),
        ("uuid + timestamp, distinct ids in bulk", _TABLE + _UUID + _TIME + _BY_DISTINCT, True),
        ("uuid + timestamp indexes", _TABLE + _UUID + _TIME, False),
        ("no index", _TABLE, False),
    ):
        cases.append(
            (
                f"{label}, 16 KB pages",
                lambda s=schema, d=deferred: _run(s, args.rows, args.batch, 16384, d),
            )
        )
    # The store's layout since retention (store/sqlite/schema.py): pointer-map pages kept so
    # that freed pages can be handed back.
    cases.append(
        (
            "uuid + timestamp, distinct ids in bulk, auto_vacuum=INCREMENTAL",
            lambda: _run(
                _TABLE + _UUID + _TIME + _BY_DISTINCT, args.rows, args.batch, 16384, True, 2
            ),
        )
    )
    for page_size in (4096, 8192, 32768):
        cases.append(
            (
                f"uuid + timestamp indexes, {page_size // 1024} KB pages",
                lambda p=page_size: _run(_TABLE + _UUID + _TIME, args.rows, args.batch, p, False),
            )
        )
    print(f"{args.rows:,} rows of ~{len(_PROPERTIES) + 80} bytes, {args.batch:,} per commit")
    for label, case in cases:
        print(f"{label:<64} {case():>10,.0f} rows/s")


if __name__ == "__main__":
    main()
