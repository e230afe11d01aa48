-- Flag usage (issue 16): $feature_flag_called events added up per flag key, UTC day (days
-- since 1970-01-01) and value (ingest/flag_usage.py), kept in the ingest transaction;
-- `flagstaff flags recompute-usage` rebuilds them from the stored events.
-- Day first: the flags list reads the last 30 days of every flag in one range.
CREATE TABLE flag_usage_daily (
    project_id INTEGER NOT NULL,
    day INTEGER NOT NULL,
    flag_key TEXT NOT NULL,
    value TEXT NOT NULL,
    checks INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    PRIMARY KEY (project_id, day, flag_key, value)
) WITHOUT ROWID;
-- One flag's days (its page, its last check ever); written only when a row is new.
CREATE INDEX flag_usage_daily_flag ON flag_usage_daily(project_id, flag_key, day);

-- A project's newest persons, the bounded sample property value suggestions read.
CREATE INDEX persons_project ON persons(project_id);
