"""The events-by-distinct-id table, appended in bulk after the events themselves.

Events are inserted in time order, so their table and their uuid and timestamp indexes grow at
one end. An index keyed by distinct id would take one random page per event instead; rather,
the events past a watermark are indexed in batches, sorted by key, so each touched page takes
many entries. Readers combine the indexed entries with a scan of the events past the watermark.
"""

from __future__ import annotations

import sqlite3

BATCH = 8_192
"""Events indexed per transaction; the ingest writer indexes sooner when it is idle. Under
load a step runs after a commit, before that batch is answered: 65,536 per step held requests
for up to ~0.2 s (bench.ingest_load p99: /i/v0/e/ 187-190 ms, /batch/ 422-551 ms); 8,192 gave
53-57 ms and 264-298 ms at the same throughput, and 2,048 cost throughput."""


def watermark(conn: sqlite3.Connection) -> int:
    row = conn.execute(
        "SELECT watermark FROM event_index_state WHERE name = 'distinct_id'"
    ).fetchone()
    return int(row[0])


def unindexed(conn: sqlite3.Connection) -> int:
    """How many sequence numbers lie past the watermark (an upper bound on events)."""
    top = conn.execute("SELECT max(seq) FROM events").fetchone()[0]
    return 0 if top is None else max(0, int(top) - watermark(conn))


def index_events(conn: sqlite3.Connection, limit: int = BATCH) -> int:
    """Index up to ``limit`` events past the watermark; call inside a write transaction.

    Returns how many sequence numbers the watermark moved (0: nothing left to index).
    """
    start = watermark(conn)
    top = conn.execute(
        "SELECT max(seq) FROM (SELECT seq FROM events WHERE seq > ? ORDER BY seq LIMIT ?)",
        (start, limit),
    ).fetchone()[0]
    if top is None:
        return 0
    conn.execute(
        "INSERT OR IGNORE INTO events_by_distinct_id (project_id, distinct_id, timestamp_ms, seq) "
        "SELECT project_id, distinct_id, timestamp_ms, seq FROM events "
        "WHERE seq > ? AND seq <= ? ORDER BY project_id, distinct_id, timestamp_ms, seq",
        (start, top),
    )
    conn.execute(
        "UPDATE event_index_state SET watermark = ? WHERE name = 'distinct_id'", (int(top),)
    )
    return int(top) - start
