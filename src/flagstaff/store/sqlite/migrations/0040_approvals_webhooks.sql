-- Approvals and outgoing webhooks (issue 16). Times are integer milliseconds since the epoch.

-- A project's approval policy: with enabled = 1, flag changes wait for a second person.
CREATE TABLE approval_policies (
    project_id INTEGER PRIMARY KEY REFERENCES projects(id),
    enabled INTEGER NOT NULL DEFAULT 0,
    updated_at_ms INTEGER NOT NULL,
    updated_by INTEGER REFERENCES users(id) ON DELETE SET NULL
);

-- A flag change waiting for approval: body is the whole flag it would write (update, delete)
-- or the scheduled change it would create (schedule); base_version the flag's version then.
CREATE TABLE change_requests (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    flag_id INTEGER REFERENCES feature_flags(id),
    kind TEXT NOT NULL CHECK (kind IN ('update', 'delete', 'schedule')),
    body TEXT NOT NULL,
    base_version INTEGER,
    author_user_id INTEGER REFERENCES users(id) ON DELETE SET NULL,
    author_key_id INTEGER,
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'applied', 'stale')),
    created_at_ms INTEGER NOT NULL,
    decided_by INTEGER REFERENCES users(id) ON DELETE SET NULL,
    decided_at_ms INTEGER,
    comment TEXT NOT NULL DEFAULT ''
);
CREATE INDEX change_requests_status ON change_requests(project_id, status, id);
CREATE INDEX change_requests_flag ON change_requests(project_id, flag_id, id);

-- Endpoints sent the project's activity; the secret signs each delivery (shown once).
CREATE TABLE webhooks (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    url TEXT NOT NULL,
    secret TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    scopes TEXT NOT NULL DEFAULT '[]',        -- JSON list of activity scopes, [] for all
    description TEXT NOT NULL DEFAULT '',
    created_at_ms INTEGER NOT NULL,
    created_by INTEGER REFERENCES users(id) ON DELETE SET NULL
);
CREATE INDEX webhooks_project ON webhooks(project_id);

-- One row per (webhook, activity row), written in the activity's transaction; the body is
-- kept so that every retry sends the same bytes. A worker claims a due row by setting
-- lease_until_ms and lease_token; only the lease holder records the attempt.
CREATE TABLE webhook_deliveries (
    id INTEGER PRIMARY KEY,
    webhook_id INTEGER NOT NULL REFERENCES webhooks(id),
    project_id INTEGER NOT NULL,
    activity_id INTEGER NOT NULL REFERENCES activity_log(id),
    event TEXT NOT NULL,
    body TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER,
    lease_until_ms INTEGER,
    lease_token TEXT,
    last_status_code INTEGER,
    last_error TEXT NOT NULL DEFAULT '',
    last_attempt_ms INTEGER,
    last_duration_ms INTEGER,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (webhook_id, activity_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_ms) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries(webhook_id, id);
