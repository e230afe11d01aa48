-- Flag usage (issue 16): $feature_flag_called events added up per flag key, UTC day (days
-- since 1970-01-01) and value (ingest/flag_usage.py), kept in the ingest transaction;
-- `flagstaff flags recompute-usage` rebuilds them from the stored events. Each process adds
-- to rows of its own lane (store/postgres/flag_usage.py), so nodes never wait on each
-- other's rows; reads add the lanes up.
-- Key first: a page reads its flags' last 30 days with one seek per flag (and a flag's last
-- check is its newest day). Today's rows are updated by every batch: half of each page is
-- left free so those updates can stay on their page (HOT) rather than add index entries.
CREATE TABLE flag_usage_daily (
    project_id bigint NOT NULL,
    flag_key text COLLATE "C" NOT NULL,
    day integer NOT NULL,
    value text COLLATE "C" NOT NULL,
    lane bigint NOT NULL,
    checks bigint NOT NULL,
    last_seen_ms bigint NOT NULL,
    PRIMARY KEY (project_id, flag_key, day, value, lane)
) WITH (fillfactor = 50);

-- A project's newest persons, the bounded sample property value suggestions read.
CREATE INDEX persons_project ON persons (project_id, id);
