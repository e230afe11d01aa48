-- Accounts (users, memberships, sessions, login attempts), personal keys' owner, prefix,
-- last use and revocation, the activity log and every flag version's body.
-- Times are integer milliseconds since the epoch.

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
-- Keys made before this migration: the mask is their prefix, created_at their time.
UPDATE personal_api_keys SET prefix = mask,
    created_at_ms = CAST(strftime('%s', created_at) AS INTEGER) * 1000;

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
