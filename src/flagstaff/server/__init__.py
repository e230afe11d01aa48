"""The running service: settings, the process and its workers, what a worker's handlers share
(store, caches, change counter, quotas, GeoIP), its background jobs and the first-start
bootstrap."""
