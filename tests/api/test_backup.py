"""``flagstaff backup`` taken while the server ingests, restored with ``flagstaff restore`` into
another data dir, served, and checked event by event against the live store; a restore is
refused while a server holds the data dir. On PostgreSQL both commands say to use pg_dump."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.api.retention_load import Sender, cli, events_at, exported, send, wait_for
from tests.server import Server, storage_backend

PADDED = 3000


def test_backup_under_load_restores_event_by_event(tmp_path: Path) -> None:
    server = Server(tmp_path / "data").start()
    restored = Server(tmp_path / "restored")
    try:
        if storage_backend() == "postgres":
            for command in ("backup", "restore"):
                done = cli(server, command, str(tmp_path / "x.sqlite3"))
                assert done.returncode == 2 and "pg_dump" in done.stderr, done.stderr
            return

        now = int(time.time() * 1000)
        for start in range(0, PADDED, 1000):
            assert send(server, events_at([now] * 1000, f"before{start}")) == 200
        sender = Sender(server, batch=20)
        sender.start()
        wait_for(lambda: len(sender.acknowledged) >= 500, 30, "events to be ingested")
        before = set(sender.acknowledged)
        target = tmp_path / "backups" / "flagstaff.sqlite3"
        done = cli(server, "backup", str(target))
        assert done.returncode == 0, done.stderr
        during = len(sender.acknowledged) - len(before)
        sender.finish()
        assert during > 0  # ingestion went on while the backup was taken
        again = cli(server, "backup", str(target))
        assert again.returncode != 0 and "exists already" in again.stderr

        refused = cli(server, "restore", str(target))
        assert refused.returncode != 0 and "stop it first" in refused.stderr, refused.stderr

        done = cli(server, "restore", str(target), data_dir=restored.data_dir)
        assert done.returncode == 0, done.stderr
        restored.start()
        live = exported(server)
        copy = exported(restored)
        assert before <= copy.keys()  # acknowledged before the backup started
        assert len(copy) >= PADDED + len(before)
        for uuid, event in copy.items():  # a consistent prefix of the live store
            assert live[uuid] == event
    finally:
        restored.stop()
        server.stop()


def test_restore_keeps_the_store_it_replaces(tmp_path: Path) -> None:
    if storage_backend() == "postgres":
        pytest.skip("SQLite only: PostgreSQL's restore is pg_restore (the first test checks so)")
    first = Server(tmp_path / "a").start()
    try:
        assert send(first, events_at([1_700_000_000_000], "a")) == 200
        assert cli(first, "backup", str(tmp_path / "a.sqlite3")).returncode == 0
    finally:
        first.stop()
    second = Server(tmp_path / "b")  # not started: the commands work on its data dir
    assert cli(second, "migrate").returncode == 0
    done = cli(second, "restore", str(tmp_path / "a.sqlite3"))
    assert done.returncode == 0, done.stderr
    kept = [p for p in second.data_dir.iterdir() if ".replaced-" in p.name]
    assert len(kept) == 1 and "kept at" in done.stdout
    assert {e["properties"]["tag"] for e in exported(second).values()} == {"a"}
    broken = tmp_path / "not-a-store"
    broken.write_bytes(b"hello")
    done = cli(second, "restore", str(broken))
    assert done.returncode != 0 and "not a Flagstaff SQLite store" in done.stderr
