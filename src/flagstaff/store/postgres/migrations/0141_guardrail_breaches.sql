-- A guardrail breach reported (activity record, webhook, auto-stop): one row per experiment,
-- guardrail metric and variant, so every worker and node reports it once.
CREATE TABLE experiment_guardrail_breaches (
    experiment_id BIGINT NOT NULL,
    metric_uuid TEXT NOT NULL,
    variant TEXT NOT NULL,
    reported_at_ms BIGINT NOT NULL,
    PRIMARY KEY (experiment_id, metric_uuid, variant)
);
