-- Experiments (issue 15): holdouts, definitions, and the aggregates ingestion keeps current.
-- A definition is the JSON of experiments.model.ExperimentDefinition; person states and totals
-- are msgpack (experiments.exposure.PersonState, ExperimentTotals).
CREATE TABLE experiment_holdouts (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    name TEXT NOT NULL,
    description TEXT,
    filters TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX experiment_holdouts_project ON experiment_holdouts(project_id);

CREATE TABLE experiments (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    feature_flag_id INTEGER NOT NULL REFERENCES feature_flags(id),
    holdout_id INTEGER REFERENCES experiment_holdouts(id),
    definition TEXT NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    deleted INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX experiments_project ON experiments(project_id, deleted);

CREATE TABLE experiment_person_state (
    experiment_id INTEGER NOT NULL,
    person_uuid TEXT NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY (experiment_id, person_uuid)
) WITHOUT ROWID;

-- One row per writer lane; SQLite has one writer, lane 0. Reads add the rows whose
-- fingerprint is the definition's current one.
CREATE TABLE experiment_totals (
    experiment_id INTEGER NOT NULL,
    lane INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    totals BLOB NOT NULL,
    PRIMARY KEY (experiment_id, lane)
) WITHOUT ROWID;
