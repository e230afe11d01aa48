"""SQLite's side of :mod:`flagstaff.store.sql.db`: how the shared statements run here.

The differences from PostgreSQL, all in one place:

- parameters: ``$1`` becomes ``?1``; casts (``$2::text``, ``count(*)::bigint``) are dropped;
- ``FOR UPDATE [OF t] [SKIP LOCKED]`` is dropped: the single writer serialises every write;
- ``IS DISTINCT FROM`` is ``IS NOT``;
- ``greatest``/``least`` are SQLite's two-argument ``max``/``min``; ``ILIKE`` is ``LIKE``
  (case-insensitive for ASCII in SQLite);
- ``= ANY($n)`` with a list becomes ``IN (SELECT value FROM json_each(?n))``;
- unique violations are :class:`sqlite3.IntegrityError` with "UNIQUE" in the message;
- JSON and booleans are stored as text and 0/1 integers.

Reads run on the worker's read connection; writes are ``async`` functions run to completion
in the writer thread (:func:`~flagstaff.store.sql.db.run_sync`) inside its savepoint.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from flagstaff.store.sql.db import Reader, Row, Tx, UniqueViolation, run_sync

if TYPE_CHECKING:
    from flagstaff.store.sqlite.writer import Writer

T = TypeVar("T")

_ANY = re.compile(r"= ANY\(\$(\d+)(?:::[a-z]+\[\])?\)")
_PARAM = re.compile(r"\$(\d+)")
_CAST = re.compile(r"::[a-z]+(?:\[\])?")
_FOR_UPDATE = re.compile(r"\s+FOR UPDATE(?: OF \w+)?(?: SKIP LOCKED)?")
_FUNCS = ((re.compile(r"\bgreatest\("), "max("), (re.compile(r"\bleast\("), "min("))


@lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """A shared (PostgreSQL-dialect) statement as SQLite runs it."""
    sql = _ANY.sub(r"IN (SELECT value FROM json_each(?\1))", sql)
    sql = _PARAM.sub(r"?\1", sql)
    sql = _CAST.sub("", sql)
    sql = _FOR_UPDATE.sub("", sql)
    for pattern, replacement in _FUNCS:
        sql = pattern.sub(replacement, sql)
    return sql.replace(" ILIKE ", " LIKE ").replace(" IS DISTINCT FROM ", " IS NOT ")


_BUMP_DEFINITIONS = (
    "INSERT INTO definitions_version (project_id, version) VALUES ($1, 1) "
    "ON CONFLICT (project_id) DO UPDATE SET version = version + 1"
)
"""The workers see the new version through the shared change counter, not a notification."""

_LISTS = (list, tuple, set, frozenset)


def _json_list(values: Any) -> str:
    """A list parameter (``= ANY($n)``) as the JSON array ``json_each`` reads."""
    return msgspec.json.encode(list(values)).decode()


def _args(args: Sequence[Any]) -> Sequence[Any]:
    for value in args:
        if isinstance(value, _LISTS):
            return [_json_list(v) if isinstance(v, _LISTS) else v for v in args]
    return args


def _run(conn: sqlite3.Connection, sql: str, args: Sequence[Any]) -> sqlite3.Cursor:
    try:
        return conn.execute(translate(sql), _args(args))
    except sqlite3.IntegrityError as exc:
        if "UNIQUE" in str(exc):
            raise UniqueViolation(str(exc)) from exc
        raise


class SQLiteConnection:
    """The :class:`~flagstaff.store.sql.db.Reader` of one sqlite3 connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    async def execute(self, sql: str, *args: Any) -> int:
        return _run(self.conn, sql, args).rowcount

    async def executemany(self, sql: str, args: Sequence[Sequence[Any]]) -> None:
        try:
            self.conn.executemany(translate(sql), [_args(a) for a in args])
        except sqlite3.IntegrityError as exc:
            if "UNIQUE" in str(exc):
                raise UniqueViolation(str(exc)) from exc
            raise

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return _run(self.conn, sql, args).fetchall()

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        return _run(self.conn, sql, args).fetchone()

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = _run(self.conn, sql, args).fetchone()
        return row[0] if row else None

    async def fetchrow_guarded(self, sql: str, *args: Any) -> Row | None:
        # A failed statement undoes itself alone in SQLite: no savepoint needed.
        return await self.fetchrow(sql, *args)

    async def bump_definitions(self, project_id: int) -> None:
        await self.execute(_BUMP_DEFINITIONS, project_id)


class SQLiteDb(SQLiteConnection):
    """Reads on the worker's read connection; writes (:meth:`write`, and single statements by
    :meth:`execute`) through the store's writer thread."""

    def __init__(self, read: Callable[[], sqlite3.Connection], writer: Callable[[], Writer]):
        self._read = read
        self._writer = writer

    # The base holds one connection in an attribute; this one asks for the worker's read
    # connection at each call, so the attribute becomes a read-only property.
    @property
    def conn(self) -> sqlite3.Connection:  # type: ignore[override]
        return self._read()

    async def execute(self, sql: str, *args: Any) -> int:
        return await self.write(lambda tx: tx.execute(sql, *args))

    async def executemany(self, sql: str, args: Sequence[Sequence[Any]]) -> None:
        await self.write(lambda tx: tx.executemany(sql, args))

    async def ping(self) -> bool:
        try:
            self._read().execute("SELECT 1").fetchone()
        except sqlite3.Error:
            return False
        return True

    async def snapshot(self, fn: Callable[[Reader], Awaitable[T]]) -> T:
        db = self._read()
        db.execute("BEGIN")
        try:
            return await fn(SQLiteConnection(db))
        finally:
            db.execute("COMMIT")

    async def write(self, fn: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        return await self._writer().submit(lambda conn: run_sync(fn(SQLiteConnection(conn))))
