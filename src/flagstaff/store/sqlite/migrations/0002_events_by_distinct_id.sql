-- Events by distinct id, maintained in bulk behind the events table instead of as an index of
-- it: a per-event index on a random key dirties about one page per event, which halved the
-- insert rate. The ingest writer appends the entries of events past `watermark` in key order
-- (store/sqlite/event_index.py); readers scan the few events past the watermark directly.
DROP INDEX events_distinct_id;

CREATE TABLE events_by_distinct_id (
    project_id INTEGER NOT NULL,
    distinct_id TEXT NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (project_id, distinct_id, timestamp_ms, seq)
) WITHOUT ROWID;

CREATE TABLE event_index_state (
    name TEXT PRIMARY KEY,
    watermark INTEGER NOT NULL
);
INSERT INTO event_index_state (name, watermark) VALUES ('distinct_id', 0);
