"""Accounts: users, password hashing, sessions, CSRF, login throttling, roles, cookies, and who
may call the API (project tokens and personal API keys in ``keys.py``), kept out of storage.

Nothing here does I/O. What the accounts need from storage is the :class:`AccountStore`
protocol in ``store.py``, implemented by both engines (``store/sqlite/accounts.py``,
``store/postgres/accounts.py``; tables in their ``0010_accounts.sql`` migrations).
"""
