"""The activity log's pure part: change records, field diffs in PostHog's shape, readable
diffs, rollback plans, and the payload, signature and retry schedule of outgoing webhooks."""
