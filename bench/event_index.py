"""The events-by-distinct-id index at 10M stored events: write cost per bucket size, read latency.

Run: ``python -m bench.event_index [--stored 10000000] [--parts steps,reads]``

``steps``: for each bucket size, a fresh database holding only the index table with ``--stored``
entries (keys as ``store/sqlite/event_index.py`` writes them, distinct ids among 200,000), then
2M more entries appended in steps of ``event_index.BATCH`` the way the ingest writer does (WAL,
``synchronous=FULL``, a 64 MB checkpoint interval): bytes this process wrote to storage
(``/proc/self/io``, WAL and checkpoints) and CPU per entry. "one bucket" is the layout before
buckets (every entry in the same subtree).

``reads``: a store with ``--stored`` events (600-byte rows) indexed by the service's own
``event_index``, where one person has an event every 1,000 (10,000 at 10M) and another one every
100,000 (100); CPU time of ``SQLiteStore.list_events`` for them (first page of 100, a page deep
in the history by cursor, and the first page of one event name).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bench.sqlite_insert import _PROPERTIES
from flagstaff.store.records import EventQuery
from flagstaff.store.sqlite import event_index
from flagstaff.store.sqlite.schema import PAGE_SIZE
from flagstaff.store.sqlite.store import SQLiteStore

MEASURED = 2 * 1024 * 1024
T0 = 1_700_000_000_000
# distinct ids of entry n, spread like a busy project's (a multiplicative hash, 200k people)
_DID = "'u' || ((n * 2654435761) % 200000)"


def _write_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("write_bytes:"))


def _series(first: int, last: int) -> str:
    return (
        f"WITH RECURSIVE s(n) AS (SELECT {first} UNION ALL SELECT n + 1 FROM s WHERE n < {last}) "
    )


def steps(folder: Path, stored: int, bits: int | None) -> tuple[float, float]:
    """Bytes written and CPU µs per entry appended past ``stored`` with ``bits`` per bucket."""
    path = folder / f"steps-{bits}.sqlite3"
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-65536")
    conn.execute(
        "CREATE TABLE x (project_id INTEGER NOT NULL, bucket INTEGER NOT NULL, "
        "distinct_id TEXT NOT NULL, timestamp_ms INTEGER NOT NULL, seq INTEGER NOT NULL, "
        "PRIMARY KEY (project_id, bucket, distinct_id, timestamp_ms, seq)) WITHOUT ROWID"
    )
    shift = 62 if bits is None else bits
    chunk = 2_000_000
    for start in range(1, stored + 1, chunk):
        end = min(stored, start + chunk - 1)
        conn.execute("BEGIN")
        conn.execute(
            _series(start, end) + f"INSERT INTO x SELECT 1, n >> {shift}, {_DID}, {T0} + n, n "
            "FROM s ORDER BY 1, 2, 3, 4, 5"
        )
        conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(f"PRAGMA wal_autocheckpoint={64 * 1024 * 1024 // PAGE_SIZE}")
    written, cpu = _write_bytes(), time.process_time()
    for start in range(stored + 1, stored + MEASURED + 1, event_index.BATCH):
        end = start + event_index.BATCH - 1
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            _series(start, end) + f"INSERT INTO x SELECT 1, n >> {shift}, {_DID}, {T0} + n, n "
            "FROM s ORDER BY 1, 2, 3, 4, 5"
        )
        conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    result = (_write_bytes() - written) / MEASURED, (time.process_time() - cpu) / MEASURED * 1e6
    conn.close()
    path.unlink()
    return result


async def reads(folder: Path, stored: int) -> list[tuple[str, float, int]]:
    """(case, median CPU ms per listing, rows) for the heavy and the light person."""
    path = folder / "reads.sqlite3"
    store = SQLiteStore(path)
    await store.open()
    project = await store.create_project("p")
    await store.close()
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-262144")
    did = f"CASE WHEN n % 1000 = 0 THEN 'heavy' WHEN n % 100000 = 7 THEN 'light' ELSE {_DID} END"
    chunk = 1_000_000
    for start in range(1, stored + 1, chunk):
        end = min(stored, start + chunk - 1)
        conn.execute("BEGIN")
        conn.execute(
            _series(start, end) + "INSERT INTO events (project_id, uuid, event, distinct_id, "
            "timestamp_ms, received_ms, historical, properties) "
            f"SELECT {project.id}, printf('01930000-0000-7000-8000-%012x', n), "
            "CASE WHEN n % 3 = 0 THEN 'clicked' ELSE '$pageview' END, "
            f"{did}, {T0} + n * 10, {T0} + n * 10, 0, ? FROM s",
            (_PROPERTIES.decode(),),
        )
        while event_index.index_events(conn, limit=chunk * 2):
            pass
        conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    store = SQLiteStore(path)
    await store.open()
    out = []
    try:
        for person in ("heavy", "light"):
            cases = {
                "first page": {},
                "page at the middle (cursor)": {"cursor": (T0 + stored * 5, stored // 2)},
                "first page of 'clicked'": {"event": "clicked"},
            }
            for case, extra in cases.items():
                times, rows = [], 0
                for _ in range(21):
                    started = time.process_time()
                    page = await store.list_events(
                        project.id, EventQuery(distinct_id=person, limit=100, **extra)
                    )
                    times.append(time.process_time() - started)
                    rows = len(page)
                out.append((f"{person}: {case}", statistics.median(times) * 1e3, rows))
    finally:
        await store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stored", type=int, default=10_000_000)
    parser.add_argument("--parts", default="steps,reads")
    parser.add_argument("--bits", default="14,16,18,20,one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/tmp") as name:
        folder = Path(name)
        if "steps" in args.parts:
            for text in args.bits.split(","):
                bits = None if text == "one" else int(text)
                label = "one bucket" if bits is None else f"2**{bits} per bucket"
                per, cpu = steps(folder, args.stored, bits)
                print(
                    f"steps at {args.stored:,} entries, {label}: {per / 1e3:.2f} KB written "
                    f"and {cpu:.1f} µs CPU per entry",
                    flush=True,
                )
        if "reads" in args.parts:
            for case, ms, rows in asyncio.run(reads(folder, args.stored)):
                print(
                    f"reads at {args.stored:,} events, {case}: {ms:.2f} ms CPU ({rows} rows)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
