"""The PostgreSQL engine: stateless nodes sharing one database.

``store.py``: the :class:`~flagstaff.store.base.Store` implementation and definitions NOTIFY.
``group_commit.py``: ingest calls queued and committed in groups. ``pool.py``: URL options
and pooled connection settings. ``schema.py`` and ``migrations/``: the schema. ``ingest.py``:
the ingest write path (claims, row locks, the rules, array writes).
"""
