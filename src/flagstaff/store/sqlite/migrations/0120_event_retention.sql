-- Per project: how many days of events to keep (NULL: forever). The ingest writer deletes
-- older events and ingestion warnings in bounded steps (store/sqlite/retention.py); the file
-- is given back by incremental vacuum (auto_vacuum=INCREMENTAL, set by store/sqlite/schema.py).
ALTER TABLE projects ADD COLUMN event_retention_days INTEGER;
CREATE INDEX ingestion_warnings_created ON ingestion_warnings(project_id, created_at_ms);
