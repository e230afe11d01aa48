"""The free-space reserve alone: its default, how often it reads the volume, and its log
lines (once when space falls below the reserve, once when it is back)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flagstaff.server.disk import MB, DiskReserve, DiskStatus, data_volume, reserve_bytes


def test_the_default_is_the_smaller_of_1_gb_and_5_percent() -> None:
    assert reserve_bytes(10 * 1024 * MB, None) == 512 * MB
    assert reserve_bytes(100 * 1024 * MB, None) == 1024 * MB
    assert reserve_bytes(100 * 1024 * MB, 300) == 300 * MB
    assert reserve_bytes(100 * 1024 * MB, 0) == 0


def test_no_reserve_on_postgresql_or_when_turned_off(tmp_path: Path) -> None:
    assert data_volume(None, None).low() is False
    assert data_volume(None, None).status() is None
    assert data_volume(tmp_path / "db.sqlite3", 0).status() is None
    assert data_volume(tmp_path / "db.sqlite3", None).status() is not None


def test_reads_at_most_once_a_second_and_logs_each_episode_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    free = [10 * MB]
    reads = []

    def read(path: Path, reserve_mb: int | None) -> DiskStatus:
        reads.append(now[0])
        return DiskStatus(str(path), free[0], 100 * MB, reserve_bytes(100 * MB, reserve_mb))

    disk = DiskReserve(tmp_path, None, clock=lambda: now[0], read=read)
    caplog.set_level(logging.INFO, logger="flagstaff")
    assert not disk.low()
    free[0] = 1 * MB  # below 5 MB
    assert not disk.low()  # not read again within the second
    now[0] = 1.5
    assert disk.low() and disk.low()
    now[0] = 3.0
    assert disk.low()
    free[0] = 50 * MB
    now[0] = 4.5
    assert not disk.low()
    assert reads == [0.0, 1.5, 3.0, 4.5]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("below the reserve" in m for m in messages) == 1
    assert sum("above the reserve again" in m for m in messages) == 1


def test_reads_every_10_ms_within_twice_the_reserve(tmp_path: Path) -> None:
    """Near the reserve a second is too long: a writer can fill a small volume's rest in it."""
    now = [0.0]
    free = [8 * MB]  # the reserve is 5 MB: within twice it
    reads = []

    def read(path: Path, reserve_mb: int | None) -> DiskStatus:
        reads.append(now[0])
        return DiskStatus(str(path), free[0], 100 * MB, reserve_bytes(100 * MB, reserve_mb))

    disk = DiskReserve(tmp_path, None, clock=lambda: now[0], read=read)
    assert not disk.low()
    free[0] = 4 * MB
    now[0] = 0.005
    assert not disk.low()  # the last reading is 5 ms old
    now[0] = 0.011
    assert disk.low()
    assert reads == [0.0, 0.011]
