"""The events-by-distinct-id table, appended in bulk after the events themselves.

Events are inserted in time order, so their table and their uuid and timestamp indexes grow at
one end. An index keyed by distinct id would take one random page per event instead; rather,
the events past a watermark are indexed in batches, sorted by key, so each touched page takes
many entries. Readers combine the indexed entries with a scan of the events past the watermark.

Sorted batches alone stop helping once the table outgrows a batch (each step's entries then
fall on thousands of leaf pages), so the key leads with a bucket of the sequence number
(``seq >> BUCKET_BITS``, after the project): a step only touches the newest bucket's subtree,
whose size is bounded whatever the table's. Readers seek each bucket of the project once,
newest first (:func:`buckets`), and merge; entries older than migration 0043 are all in
bucket 0. Buckets only grow with seq. The measurements behind both numbers:
``docs/benchmarks.md``, "Measured choices behind the code".
"""

from __future__ import annotations

import sqlite3

BATCH = 8_192
"""Events indexed per transaction; the ingest writer indexes sooner when it is idle. Under
load a step runs after a commit, before that batch is answered, so a step must stay short."""


BUCKET_BITS = 18
"""2**18 = 262,144 sequence numbers per bucket: smaller buckets write less per step, larger
ones mean fewer seeks per listing (38 at 10M events)."""


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
        "INSERT OR IGNORE INTO events_by_distinct_id "
        "(project_id, bucket, distinct_id, timestamp_ms, seq) "
        "SELECT project_id, seq >> ?, distinct_id, timestamp_ms, seq FROM events "
        "WHERE seq > ? AND seq <= ? ORDER BY project_id, seq >> ?, distinct_id, timestamp_ms, seq",
        (BUCKET_BITS, start, top, BUCKET_BITS),
    )
    conn.execute(
        "UPDATE event_index_state SET watermark = ? WHERE name = 'distinct_id'", (int(top),)
    )
    return int(top) - start


def buckets(conn: sqlite3.Connection, project_id: int) -> range:
    """The project's buckets, newest first (empty when nothing of it is indexed)."""
    query = "SELECT {}(bucket) FROM events_by_distinct_id WHERE project_id = ?"
    top = conn.execute(query.format("max"), (project_id,)).fetchone()[0]
    if top is None:
        return range(0)
    low = conn.execute(query.format("min"), (project_id,)).fetchone()[0]
    return range(int(top), int(low) - 1, -1)
