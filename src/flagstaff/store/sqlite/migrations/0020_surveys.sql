-- Surveys, early access features and the survey event aggregates (issue 14).
-- A survey or feature is kept as its msgspec JSON (surveys.model.Survey,
-- surveys.early_access.EarlyAccessFeature) plus the columns queries need.
CREATE TABLE surveys (
    id TEXT PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    name TEXT NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX surveys_name ON surveys(project_id, name);
CREATE INDEX surveys_by_project ON surveys(project_id, created_at);

CREATE TABLE early_access_features (
    id TEXT PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    feature_flag_id INTEGER,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE UNIQUE INDEX early_access_features_flag ON early_access_features(feature_flag_id)
    WHERE feature_flag_id IS NOT NULL;
CREATE INDEX early_access_features_by_project ON early_access_features(project_id, created_at);

-- surveys.stats.encode(SurveyStats); responses = its survey sent count (responses_limit).
CREATE TABLE survey_aggregates (
    project_id INTEGER NOT NULL,
    survey_id TEXT NOT NULL,
    state BLOB NOT NULL,
    responses INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (project_id, survey_id)
);
