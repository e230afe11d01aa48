-- Draft: accounts, activity log, webhooks, scheduled changes and approvals (SQLite).
-- The store pass turns this into store/sqlite migrations (numbered after the existing ones).
-- Times are integer milliseconds since the epoch. JSON documents are TEXT.

CREATE TABLE users (
    id INTEGER PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,               -- normalised: trimmed, lower case
    password_hash TEXT NOT NULL,              -- argon2id, PHC string
    first_name TEXT NOT NULL DEFAULT '',
    is_active INTEGER NOT NULL DEFAULT 1,
    created_at_ms INTEGER NOT NULL,
    last_login_ms INTEGER
);

CREATE TABLE memberships (
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    role TEXT NOT NULL CHECK (role IN ('admin', 'editor', 'viewer')),
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (user_id, project_id)
) WITHOUT ROWID;
CREATE INDEX memberships_project ON memberships(project_id, user_id);

-- Only the SHA-256 of the cookie's token is stored.
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    token_hash TEXT NOT NULL UNIQUE,
    created_at_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    ip TEXT NOT NULL DEFAULT '',
    user_agent TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sessions_user ON sessions(user_id);
CREATE INDEX sessions_expiry ON sessions(expires_at_ms);

CREATE TABLE login_attempts (
    id INTEGER PRIMARY KEY,
    email TEXT NOT NULL,
    ip TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    succeeded INTEGER NOT NULL
);
CREATE INDEX login_attempts_email ON login_attempts(email, at_ms);
CREATE INDEX login_attempts_ip ON login_attempts(ip, at_ms);

-- Personal keys gain an owner, a listable prefix, last use and revocation. Keys made before
-- accounts existed keep user_id NULL and act as admins of their project.
ALTER TABLE personal_api_keys ADD COLUMN user_id INTEGER REFERENCES users(id);
ALTER TABLE personal_api_keys ADD COLUMN prefix TEXT NOT NULL DEFAULT '';
ALTER TABLE personal_api_keys ADD COLUMN created_at_ms INTEGER;
ALTER TABLE personal_api_keys ADD COLUMN last_used_ms INTEGER;
ALTER TABLE personal_api_keys ADD COLUMN revoked_at_ms INTEGER;
CREATE INDEX personal_api_keys_user ON personal_api_keys(project_id, user_id);

-- One row per change, written in the same transaction as the change itself.
CREATE TABLE activity_log (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    scope TEXT NOT NULL,                      -- FeatureFlag, Cohort, PersonalAPIKey, ...
    item_id TEXT,
    activity TEXT NOT NULL,                   -- created, updated, deleted, rolled_back, ...
    user_id INTEGER REFERENCES users(id) ON DELETE SET NULL,
    is_system INTEGER NOT NULL DEFAULT 0,
    detail TEXT NOT NULL,                     -- {"changes": [...], "name": ..., "trigger": ...}
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX activity_log_item ON activity_log(project_id, scope, item_id, id);
CREATE INDEX activity_log_project ON activity_log(project_id, id);

-- The full flag body at each version, for readable history and rollback.
CREATE TABLE feature_flag_versions (
    flag_id INTEGER NOT NULL REFERENCES feature_flags(id),
    version INTEGER NOT NULL,
    project_id INTEGER NOT NULL,
    data TEXT NOT NULL,
    activity_id INTEGER REFERENCES activity_log(id),
    user_id INTEGER REFERENCES users(id) ON DELETE SET NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (flag_id, version)
) WITHOUT ROWID;

CREATE TABLE webhooks (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    url TEXT NOT NULL,
    secret TEXT NOT NULL,                     -- HMAC key; shown once at creation
    scopes TEXT NOT NULL DEFAULT '[]',        -- JSON list; empty = every scope
    enabled INTEGER NOT NULL DEFAULT 1,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX webhooks_project ON webhooks(project_id);

CREATE TABLE webhook_deliveries (
    id INTEGER PRIMARY KEY,
    webhook_id INTEGER NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    activity_id INTEGER NOT NULL REFERENCES activity_log(id),
    payload TEXT NOT NULL,                    -- the exact bytes signed and sent
    status TEXT NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER,
    last_status_code INTEGER,
    last_error TEXT NOT NULL DEFAULT '',
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_ms) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries(webhook_id, id);

CREATE TABLE scheduled_changes (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    flag_id INTEGER NOT NULL REFERENCES feature_flags(id),
    operation TEXT NOT NULL CHECK (operation IN ('update_status', 'add_release_condition', 'update_variants', 'update_rollout')),
    payload TEXT NOT NULL,                    -- JSON: {"operation": ..., "value": ...}
    run_at_ms INTEGER NOT NULL,
    created_by INTEGER REFERENCES users(id) ON DELETE SET NULL,
    created_at_ms INTEGER NOT NULL,
    executed_at_ms INTEGER,
    failure TEXT
);
CREATE INDEX scheduled_changes_due ON scheduled_changes(run_at_ms) WHERE executed_at_ms IS NULL;
CREATE INDEX scheduled_changes_flag ON scheduled_changes(project_id, flag_id);

-- Per project: whether flag changes wait for a second person.
CREATE TABLE approval_policies (
    project_id INTEGER PRIMARY KEY REFERENCES projects(id),
    enabled INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE change_requests (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    flag_id INTEGER REFERENCES feature_flags(id),   -- NULL for a flag still to be created
    body TEXT NOT NULL,                              -- the create or PATCH body, validated
    base_version INTEGER,                            -- the flag version the body was made from
    author_user_id INTEGER REFERENCES users(id) ON DELETE SET NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'applied', 'stale')),
    decided_by INTEGER REFERENCES users(id) ON DELETE SET NULL,
    decided_at_ms INTEGER,
    comment TEXT NOT NULL DEFAULT '',
    created_at_ms INTEGER NOT NULL,
    applied_at_ms INTEGER
);
CREATE INDEX change_requests_pending ON change_requests(project_id, status, id);
