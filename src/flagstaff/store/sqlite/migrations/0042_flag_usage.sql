-- Flag usage (issue 16): $feature_flag_called events added up per flag key, UTC day (days
-- since 1970-01-01) and value (ingest/flag_usage.py), kept in the ingest transaction;
-- `flagstaff flags recompute-usage` rebuilds them from the stored events.
-- Key first: a page reads its flags' last 30 days with one seek per flag (and a flag's last
-- check is its newest day).
CREATE TABLE flag_usage_daily (
    project_id INTEGER NOT NULL,
    flag_key TEXT NOT NULL,
    day INTEGER NOT NULL,
    value TEXT NOT NULL,
    checks INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    PRIMARY KEY (project_id, flag_key, day, value)
) WITHOUT ROWID;

-- A project's newest persons, the bounded sample property value suggestions read.
CREATE INDEX persons_project ON persons(project_id);
