"""What the shared management code asks of an engine: reads, and write transactions.

Statements are written in PostgreSQL's dialect (``$1`` parameters, ``RETURNING``, ``ON
CONFLICT``, ``::type`` casts, ``FOR UPDATE``); the SQLite dialect rewrites the few differences.
A write is an ``async`` function of a :class:`Tx`: on PostgreSQL it runs in a transaction on a
pooled connection; on SQLite it runs inside the writer thread's savepoint, where every ``await``
of the transaction completes at once, so :func:`run_sync` drives it to its end without a loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

import msgspec

from flagstaff.store.records import Page

T = TypeVar("T")
Row = Sequence[Any]
"""A result row: its columns by position (sqlite3 tuples, asyncpg records)."""


class UniqueViolation(Exception):
    """A write broke a unique constraint (the engine's own error is the cause)."""


class JsonText(str):
    """A JSON document bound as text (PostgreSQL's ``jsonb`` cannot hold ``\\u0000``)."""


def json_arg(value: Any) -> JsonText:
    return JsonText(msgspec.json.encode(value).decode())


class Reader(Protocol):
    """Statements on one connection (a write transaction, or a read)."""

    async def execute(self, sql: str, *args: Any) -> int:
        """Run a statement; the number of rows it changed."""
        ...

    async def executemany(self, sql: str, args: Sequence[Sequence[Any]]) -> None: ...

    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...

    async def fetchrow(self, sql: str, *args: Any) -> Row | None: ...

    async def fetchval(self, sql: str, *args: Any) -> Any: ...


class Tx(Reader, Protocol):
    """A write transaction's statements: everything commits together, or nothing."""

    async def fetchrow_guarded(self, sql: str, *args: Any) -> Row | None:
        """:meth:`fetchrow` for a statement that may break a unique constraint: its
        :class:`UniqueViolation` leaves the rest of the transaction standing."""
        ...

    async def bump_definitions(self, project_id: int) -> None:
        """Move the project's definitions version, so every worker (and every node) re-reads
        its flags, cohorts and surveys on its next request."""
        ...


class Db(Reader, Protocol):
    """Reads (each on a connection of its own) and :meth:`write` transactions; its
    :meth:`execute` and :meth:`executemany` are writes of one statement each."""

    async def write(self, fn: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        """Run ``fn`` in one transaction; its result once durably committed."""
        ...

    async def snapshot(self, fn: Callable[[Reader], Awaitable[T]]) -> T:
        """Run ``fn``'s reads on one consistent view of the database."""
        ...

    async def ping(self) -> bool:
        """Whether the database answers a trivial query now."""
        ...


async def insert_id(tx: Tx, sql: str, *args: Any) -> int:
    """Run an ``INSERT ... RETURNING id``; the new row's id."""
    return int(await tx.fetchval(sql, *args))


async def by_id(
    db: Reader, table: str, columns: str, project_id: int, row_id: Any, lock: bool = False
) -> Row | None:
    """Row ``row_id`` of a project's ``table`` (with ``lock``, locked until the transaction
    ends on PostgreSQL)."""
    lock_clause = " FOR UPDATE" if lock else ""
    sql = f"SELECT {columns} FROM {table} WHERE project_id = $1 AND id = $2{lock_clause}"
    return await db.fetchrow(sql, project_id, row_id)


async def page(
    db: Reader,
    source: str,
    columns: str,
    order: str,
    args: Sequence[Any],
    limit: int,
    offset: int,
    record: Callable[[Row], Any],
) -> Page:
    """Rows ``offset`` to ``offset + limit`` of ``SELECT columns FROM source ORDER BY order``
    as records, with the count of every row (``source``: a table and its WHERE over ``args``)."""
    n = len(args)
    count = await db.fetchval(f"SELECT count(*) FROM {source}", *args)
    rows = await db.fetch(
        f"SELECT {columns} FROM {source} ORDER BY {order} LIMIT ${n + 1} OFFSET ${n + 2}",
        *args,
        limit,
        offset,
    )
    return Page(int(count), [record(r) for r in rows])


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never suspends (SQLite statements in the writer thread)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a SQLite write awaited something other than its transaction")
