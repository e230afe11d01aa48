"""Storage: the interface in ``base.py``, one package per engine (``sqlite/``, ``postgres/``)."""
