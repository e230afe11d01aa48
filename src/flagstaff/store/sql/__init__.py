"""The management features written once for both engines (accounts and the activity log,
approvals, webhooks, surveys and early access, experiment definitions, projects and cohorts).

Each module here is a mixin of both stores over :class:`~flagstaff.store.sql.db.Db`, with its
statements in PostgreSQL's dialect; what differs per engine is stated once per engine, in
``store/sqlite/dialect.py`` and ``store/postgres/dialect.py``. The tuned hot paths (flag
context, ingestion, experiment aggregates, usage) stay in the engines' own modules.
"""
