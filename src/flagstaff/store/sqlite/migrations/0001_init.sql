-- Projects, keys, definitions, persons, groups, events, ingestion warnings.
CREATE TABLE projects (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    api_token TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
);

CREATE TABLE personal_api_keys (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    label TEXT NOT NULL,
    secure_value TEXT NOT NULL UNIQUE,
    mask TEXT NOT NULL,
    created_at TEXT NOT NULL
);

-- Bumped on every flag, cohort or group type change: workers poll it to refresh their caches.
CREATE TABLE definitions_version (
    project_id INTEGER PRIMARY KEY,
    version INTEGER NOT NULL
);

CREATE TABLE feature_flags (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX feature_flags_active_key ON feature_flags(project_id, key) WHERE deleted = 0;

CREATE TABLE cohorts (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    is_static INTEGER NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0,
    version INTEGER NOT NULL,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE TABLE persons (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL,
    uuid TEXT NOT NULL UNIQUE,
    properties TEXT NOT NULL,
    is_identified INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE person_distinct_ids (
    project_id INTEGER NOT NULL,
    distinct_id TEXT NOT NULL,
    person_id INTEGER NOT NULL,
    PRIMARY KEY (project_id, distinct_id)
) WITHOUT ROWID;
CREATE INDEX person_distinct_ids_person ON person_distinct_ids(person_id);

-- Static cohort membership by distinct id, so it follows person merges and may name a
-- distinct id before its first event.
CREATE TABLE cohort_members (
    cohort_id INTEGER NOT NULL,
    distinct_id TEXT NOT NULL,
    PRIMARY KEY (cohort_id, distinct_id)
) WITHOUT ROWID;
CREATE INDEX cohort_members_distinct_id ON cohort_members(distinct_id);

CREATE TABLE hash_key_overrides (
    project_id INTEGER NOT NULL,
    person_id INTEGER NOT NULL,
    feature_flag_key TEXT NOT NULL,
    hash_key TEXT NOT NULL,
    PRIMARY KEY (project_id, person_id, feature_flag_key)
) WITHOUT ROWID;

CREATE TABLE group_types (
    project_id INTEGER NOT NULL,
    group_type_index INTEGER NOT NULL,
    group_type TEXT NOT NULL,
    PRIMARY KEY (project_id, group_type_index),
    UNIQUE (project_id, group_type)
) WITHOUT ROWID;

CREATE TABLE groups (
    project_id INTEGER NOT NULL,
    group_type_index INTEGER NOT NULL,
    group_key TEXT NOT NULL,
    properties TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, group_type_index, group_key)
) WITHOUT ROWID;

CREATE TABLE events (
    seq INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL,
    uuid TEXT NOT NULL,
    event TEXT NOT NULL,
    distinct_id TEXT NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    received_ms INTEGER NOT NULL,
    historical INTEGER NOT NULL DEFAULT 0,
    properties TEXT NOT NULL
);
CREATE UNIQUE INDEX events_uuid ON events(project_id, uuid);
CREATE INDEX events_distinct_id ON events(project_id, distinct_id, timestamp_ms);
CREATE INDEX events_timestamp ON events(project_id, timestamp_ms);

CREATE TABLE ingestion_warnings (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL,
    type TEXT NOT NULL,
    details TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX ingestion_warnings_project ON ingestion_warnings(project_id, id);
