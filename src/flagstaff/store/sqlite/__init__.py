"""The SQLite engine: one database file, one writer at a time.

Read ``store.py`` first (the :class:`~flagstaff.store.base.Store` implementation and the
migrations); the rest is its write path and the ingest writer process.
"""
