-- Scheduled flag changes (PostHog's /scheduled_changes/): run once when due, by whichever
-- worker claims them first (executed_at_ms is set by the claim; failure says why one failed).
CREATE TABLE scheduled_changes (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    flag_id INTEGER NOT NULL REFERENCES feature_flags(id),
    operation TEXT NOT NULL CHECK (operation IN ('update_status', 'add_release_condition', 'update_variants', 'update_rollout')),
    payload TEXT NOT NULL,
    run_at_ms INTEGER NOT NULL,
    created_by INTEGER REFERENCES users(id) ON DELETE SET NULL,
    created_at_ms INTEGER NOT NULL,
    executed_at_ms INTEGER,
    failure TEXT
);
CREATE INDEX scheduled_changes_due ON scheduled_changes(run_at_ms) WHERE executed_at_ms IS NULL;
CREATE INDEX scheduled_changes_flag ON scheduled_changes(project_id, flag_id);
