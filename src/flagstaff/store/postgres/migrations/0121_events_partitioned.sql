-- Events partitioned by month of their timestamp, so that retention drops whole partitions
-- (store/postgres/partitions.py creates them ahead and drops the expired ones). Migrates in
-- place: the old table is renamed, its rows moved, then dropped.
--
-- A unique index of a partitioned table must include the partition key, and a retried event
-- may come back with another corrected timestamp: uuids are kept unique in event_uuids
-- instead, which ingestion fills in the same statement (ON CONFLICT DO NOTHING) and retention
-- trims with the events. `seq` comes from a sequence (identity columns cannot be declared
-- on a partitioned table before PostgreSQL 17); it stays unique, it is no longer a key.
ALTER TABLE events RENAME TO events_unpartitioned;
ALTER INDEX events_pkey RENAME TO events_unpartitioned_pkey;
ALTER INDEX events_uuid RENAME TO events_unpartitioned_uuid;
ALTER INDEX events_distinct_id RENAME TO events_unpartitioned_distinct_id;
ALTER INDEX events_timestamp RENAME TO events_unpartitioned_timestamp;

CREATE SEQUENCE events_seq AS bigint;
SELECT setval('events_seq', COALESCE((SELECT max(seq) FROM events_unpartitioned), 0) + 1, false);

CREATE TABLE events (
    seq bigint NOT NULL DEFAULT nextval('events_seq'),
    project_id bigint NOT NULL,
    uuid uuid NOT NULL,
    event text COLLATE "C" NOT NULL,
    distinct_id text COLLATE "C" NOT NULL,
    timestamp_ms bigint NOT NULL,
    received_ms bigint NOT NULL,
    historical boolean NOT NULL DEFAULT false,
    properties json NOT NULL
) PARTITION BY RANGE (timestamp_ms);
ALTER SEQUENCE events_seq OWNED BY events.seq;
CREATE INDEX events_seq_index ON events (seq);
CREATE INDEX events_distinct_id ON events (project_id, distinct_id, timestamp_ms, seq);
CREATE INDEX events_timestamp ON events (project_id, timestamp_ms, seq);
-- Events whose month has no partition (older than the first, or beyond those created ahead).
CREATE TABLE events_default PARTITION OF events DEFAULT;
-- The retention pass looks here for months that deserve a partition of their own: an index
-- range, whatever lies outside it (events stamped 1970 by a client's clock...).
CREATE INDEX events_default_timestamp ON events_default (timestamp_ms);

CREATE TABLE event_uuids (
    project_id bigint NOT NULL,
    uuid uuid NOT NULL,
    timestamp_ms bigint NOT NULL,
    PRIMARY KEY (project_id, uuid)
);
CREATE INDEX event_uuids_timestamp ON event_uuids (project_id, timestamp_ms);

-- One partition per UTC month that has events (at most ten years back; older ones stay in the
-- default partition), and this month and the next two.
DO $$
DECLARE
    floor_ms bigint := (extract(epoch FROM date_trunc('month', now() AT TIME ZONE 'UTC')
                        - interval '10 years') * 1000)::bigint;
    this_month timestamp := date_trunc('month', now() AT TIME ZONE 'UTC');
    m timestamp;
BEGIN
    FOR m IN
        SELECT DISTINCT date_trunc('month', to_timestamp(timestamp_ms / 1000.0) AT TIME ZONE 'UTC')
        FROM events_unpartitioned WHERE timestamp_ms >= floor_ms
          AND timestamp_ms < (extract(epoch FROM this_month + interval '3 months') * 1000)::bigint
        UNION
        SELECT this_month + n * interval '1 month' FROM generate_series(0, 2) AS n
    LOOP
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%s) TO (%s)',
            'events_p' || to_char(m, 'YYYYMM'),
            (extract(epoch FROM m AT TIME ZONE 'UTC') * 1000)::bigint,
            (extract(epoch FROM (m + interval '1 month') AT TIME ZONE 'UTC') * 1000)::bigint
        );
    END LOOP;
END
$$;

INSERT INTO events (seq, project_id, uuid, event, distinct_id, timestamp_ms, received_ms,
                    historical, properties)
SELECT seq, project_id, uuid, event, distinct_id, timestamp_ms, received_ms, historical,
       properties FROM events_unpartitioned;
INSERT INTO event_uuids (project_id, uuid, timestamp_ms)
SELECT project_id, uuid, timestamp_ms FROM events_unpartitioned;
DROP TABLE events_unpartitioned;
