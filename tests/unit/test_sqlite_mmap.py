"""``FLAGSTAFF_SQLITE_MMAP_MB``: how much of the SQLite file each connection maps."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from flagstaff.server.config import ConfigError, Settings
from flagstaff.server.services import make_store
from flagstaff.store.sqlite.store import SQLiteStore
from flagstaff.store.sqlite.writer import DEFAULT_MMAP_MB, MAX_MMAP_MB, connect

MB = 1024 * 1024


def test_the_setting_is_read_from_the_environment() -> None:
    assert Settings.from_env({}).sqlite_mmap_mb == DEFAULT_MMAP_MB
    assert Settings.from_env({"FLAGSTAFF_SQLITE_MMAP_MB": "0"}).sqlite_mmap_mb == 0
    assert Settings.from_env({"FLAGSTAFF_SQLITE_MMAP_MB": "64"}).sqlite_mmap_mb == 64
    env = Settings(sqlite_mmap_mb=32).to_env()
    assert Settings.from_env(env).sqlite_mmap_mb == 32


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("lots", "FLAGSTAFF_SQLITE_MMAP_MB must be an integer, got 'lots'"),
        ("64MB", "FLAGSTAFF_SQLITE_MMAP_MB must be an integer"),
        ("-1", "FLAGSTAFF_SQLITE_MMAP_MB must be >= 0, got -1"),
        (str(MAX_MMAP_MB + 1), f"between 0 and {MAX_MMAP_MB} MB, got {MAX_MMAP_MB + 1}"),
    ],
)
def test_bad_values_are_refused(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({"FLAGSTAFF_SQLITE_MMAP_MB": raw})


def test_serve_refuses_a_bad_value_at_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "flagstaff", "serve", "--data-dir", str(tmp_path / "data")],
        env={
            "FLAGSTAFF_SQLITE_MMAP_MB": "lots",
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": ":".join(sys.path),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "FLAGSTAFF_SQLITE_MMAP_MB must be an integer, got 'lots'" in done.stderr
    assert not (tmp_path / "data" / "flagstaff.sqlite3").exists()


@pytest.mark.parametrize("mb", [0, 16, DEFAULT_MMAP_MB])
def test_connections_map_what_is_set(tmp_path: Path, mb: int) -> None:
    conn = connect(tmp_path / "db.sqlite3", mmap_mb=mb)
    assert conn.execute("PRAGMA mmap_size").fetchone()[0] == mb * MB
    conn.close()


def test_the_store_reads_through_the_set_map(tmp_path: Path) -> None:
    asyncio.run(_store_reads(tmp_path))


async def _store_reads(tmp_path: Path) -> None:
    store = make_store(Settings(data_dir=tmp_path, sqlite_mmap_mb=16))
    assert isinstance(store, SQLiteStore)
    await store.open()
    try:
        assert store.db.execute("PRAGMA mmap_size").fetchone()[0] == 16 * MB
        assert (
            await store._read_in_thread(lambda c: c.execute("PRAGMA mmap_size").fetchone()[0])
            == 16 * MB
        )
    finally:
        await store.close()
