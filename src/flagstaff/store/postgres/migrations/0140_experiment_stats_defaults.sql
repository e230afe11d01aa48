-- Per project: the stats_config fields a new experiment takes when its request leaves them
-- out (JSON text of an object; NULL: PostHog's meanings). See experiments/model.py.
ALTER TABLE projects ADD COLUMN experiment_stats_defaults TEXT;
