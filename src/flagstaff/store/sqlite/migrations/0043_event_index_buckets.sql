-- Events by distinct id, keyed by a bucket of the ingest sequence after the project: each index
-- step then inserts into the newest bucket's small subtree instead of pages spread over the
-- whole table (store/sqlite/event_index.py). SQLite only: PostgreSQL keeps a plain index on
-- events. Entries indexed before this migration are never written again; they are copied, in
-- their existing key order, into bucket 0, which readers seek once like any other bucket.
CREATE TABLE events_by_distinct_id_new (
    project_id INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    distinct_id TEXT NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (project_id, bucket, distinct_id, timestamp_ms, seq)
) WITHOUT ROWID;

INSERT INTO events_by_distinct_id_new (project_id, bucket, distinct_id, timestamp_ms, seq)
SELECT project_id, 0, distinct_id, timestamp_ms, seq FROM events_by_distinct_id
ORDER BY project_id, distinct_id, timestamp_ms, seq;

DROP TABLE events_by_distinct_id;

ALTER TABLE events_by_distinct_id_new RENAME TO events_by_distinct_id;
