"""``flagstaff backup PATH`` and ``flagstaff restore PATH`` for the SQLite store.

A backup is ``VACUUM INTO``: one read transaction, so a consistent snapshot of the store as of
its start, taken while the server serves (readers never block the ingest writer in WAL mode;
the WAL grows meanwhile, as its checkpoint cannot pass the backup's snapshot). The copy is
compact (no free pages) and checked (``PRAGMA quick_check``) before it is given its name.

A restore refuses while a server holds the data dir (the ingest writer's lock), keeps the
store it replaces beside it (``flagstaff.sqlite3.replaced-<time>``) and puts the backup in its
place; the next start migrates it if it is older than the code.

On PostgreSQL both say how to use ``pg_dump`` / point-in-time recovery instead (the database
server owns the data; docs/operations.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

POSTGRES_RECIPE = (
    "the store is PostgreSQL: back it up with the database's own tools, e.g. "
    "'pg_dump --format=custom --file=flagstaff.dump DBNAME' (a consistent snapshot while "
    "Flagstaff serves) and 'pg_restore --clean --dbname=DBNAME flagstaff.dump', or continuous "
    "archiving with point-in-time recovery; see docs/operations.md"
)


class BackupError(Exception):
    """Said to the operator; nothing was changed."""


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check(path: Path) -> None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        result = conn.execute("PRAGMA quick_check").fetchone()[0]
        conn.execute("SELECT count(*) FROM schema_migrations").fetchone()
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path} is not a Flagstaff SQLite store: {exc}") from None
    finally:
        conn.close()
    if result != "ok":
        raise BackupError(f"{path} failed its integrity check: {result}")


def backup(db: Path, target: Path) -> int:
    """Write a consistent copy of ``db`` to ``target`` (which must not exist); its size."""
    if not db.exists():
        raise BackupError(f"there is no store at {db}")
    if target.exists():
        raise BackupError(f"{target} exists already: choose a new file name")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None, timeout=30)
    try:
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("VACUUM INTO ?", (str(partial),))
    finally:
        conn.close()
    try:
        with partial.open("rb+") as f:
            os.fsync(f.fileno())
        _check(partial)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, target)
    _fsync_dir(target.parent)
    return target.stat().st_size


@contextlib.contextmanager
def _data_dir_lock(db: Path) -> Iterator[None]:
    """The ingest writer's lock: held by a serving Flagstaff, held here while restoring."""
    fd = os.open(str(db) + ".ingest-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BackupError(
                f"a Flagstaff server is using {db.parent}: stop it first (or start a server "
                "on a copy: see docs/operations.md)"
            ) from None
        yield
    finally:
        os.close(fd)


def restore(source: Path, db: Path) -> Path | None:
    """Put the backup ``source`` in place of ``db``; the path the replaced store was kept at."""
    if not source.is_file():
        raise BackupError(f"there is no backup at {source}")
    _check(source)
    db.parent.mkdir(parents=True, exist_ok=True)
    with _data_dir_lock(db):
        incoming = db.with_name(db.name + ".restoring")
        shutil.copyfile(source, incoming)
        with incoming.open("rb+") as f:
            os.fsync(f.fileno())
        kept = None
        if db.exists():
            # Fold the WAL into the file it belongs to, then keep that file aside.
            conn = sqlite3.connect(str(db), isolation_level=None)
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                conn.close()
            kept = db.with_name(f"{db.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}")
            os.replace(db, kept)
        for suffix in ("-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        os.replace(incoming, db)
        _fsync_dir(db.parent)
    return kept
