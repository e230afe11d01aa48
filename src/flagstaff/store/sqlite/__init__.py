"""The SQLite engine: one database file in WAL mode, writers taking turns under one lock.

``store.py``: the :class:`~flagstaff.store.base.Store` implementation (reads and admin writes).
``schema.py`` and ``migrations/``: the schema. ``writer.py``: connections, the writer lock and
the group-committing writer thread. ``ingest.py``: the ingest write path (load, rules, plan,
execute). ``ingestd.py``: the ingest writer process under ``flagstaff serve``, with
``protocol.py`` (its frames), ``client.py`` (the workers' side) and ``person_cache.py``.
``event_index.py``: events by distinct id, indexed in bulk past a watermark.
"""
