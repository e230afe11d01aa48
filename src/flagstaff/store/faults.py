"""Which exceptions mean "the database cannot be reached or written right now".

Those are answered 503 with ``Retry-After`` (the client retries the same request later), not
500: a PostgreSQL restart or crash, a dropped connection, too many connections, a full disk, a
SQLite file that cannot be written, an ingest writer that is down. Anything else (a bug, a
broken rule) stays a 500. The drivers' own exception types are matched here, once, so every
route maps them the same way (see :mod:`flagstaff.server.outage`).
"""

from __future__ import annotations

import sqlite3

from flagstaff.store.base import Conflict, NotFound, StoreError

try:  # PostgreSQL is optional at runtime
    import asyncpg
except ImportError:  # pragma: no cover - asyncpg is a dependency today
    asyncpg = None

__all__ = ["is_unavailable"]

_PG_CLASSES = ("08", "53", "57", "58")
"""SQLSTATE classes of an unreachable or overloaded server: connection exception (08),
insufficient resources (53: disk full, out of memory, too many connections), operator
intervention (57: shutdown, crash, cannot connect now, statement cancelled), system error (58:
I/O)."""
_PG_CODES = frozenset({"25006", "40001", "40P01"})
"""A read-only transaction (a standby after a fail-over) and the retryable conflicts."""

_SQLITE_CODES = frozenset(
    {
        5,  # SQLITE_BUSY
        6,  # SQLITE_LOCKED
        7,  # SQLITE_NOMEM
        8,  # SQLITE_READONLY
        10,  # SQLITE_IOERR ("disk I/O error")
        13,  # SQLITE_FULL ("database or disk is full")
        14,  # SQLITE_CANTOPEN
        15,  # SQLITE_PROTOCOL
    }
)
_SQLITE_MESSAGES = ("disk i/o", "disk is full", "database is locked", "unable to open", "readonly")
"""For errors without a result code (older Pythons, or raised from a message)."""


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot serve now (so: 503 and retry later)."""
    if isinstance(exc, (Conflict, NotFound)):
        return False
    if isinstance(exc, StoreError):
        # Raised by the stores themselves for a failed write (the ingest writer down or
        # failing, persons that kept changing): the request changed nothing, retry it.
        return True
    if isinstance(exc, (OSError, TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in _SQLITE_CODES:
            return True
        text = str(exc).lower()
        return any(part in text for part in _SQLITE_MESSAGES)
    if asyncpg is not None:
        if isinstance(exc, (asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError)):
            # "connection is closed", "pool is closing", a connection lost mid-query; and a
            # connection left in a broken protocol state by a server that went away under it
            # ("cannot switch to state 15; another operation is in progress"), seen on a
            # pooled connection during a PostgreSQL restart.
            return True
        if isinstance(exc, asyncpg.PostgresError):
            state = getattr(exc, "sqlstate", None) or ""
            return state[:2] in _PG_CLASSES or state in _PG_CODES
    return False
