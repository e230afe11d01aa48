-- Per project: how many days of events to keep (NULL: forever). One node at a time deletes
-- older events and ingestion warnings (store/postgres/retention.py).
ALTER TABLE projects ADD COLUMN event_retention_days integer;
CREATE INDEX ingestion_warnings_created ON ingestion_warnings (project_id, created_at_ms);
