"""The PostgreSQL engine: stateless nodes sharing one database.

Read ``store.py`` first (the :class:`~flagstaff.store.base.Store` implementation, the pool and
the migrations); ``ingest.py`` is the batched ingest write path.
"""
