"""The free-space reserve of the data volume: ingestion is refused while free space is below it.

A disk filled to the last byte fails every write, checkpoints and the management API's
included. So ingestion, the only write that grows without bound, stops first: while the
volume holding the SQLite store has less free space than the reserve, the capture routes
answer 503 with ``Retry-After`` (the SDKs keep the events and retry) and ``/_ready`` says why.
The console, the management API, checkpoints and retention keep working in what is left.

The reserve is ``FLAGSTAFF_DISK_RESERVE_MB``, by default min(1 GB, 5% of the volume); 0 turns
it off. Free space is read (``statvfs``: space available to the service's user) at most once
per :data:`CHECK_SECONDS` per worker, on the request that finds the last reading stale.

On PostgreSQL the events are written to the database server's volume, which this process
cannot see: there is no reserve (the database refuses writes itself when its disk is full,
answered 503 like any store failure). Watch that volume where PostgreSQL runs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from flagstaff.ops import logs

MB = 1024 * 1024
DEFAULT_RESERVE_BYTES = 1024 * MB
DEFAULT_RESERVE_FRACTION = 0.05
CHECK_SECONDS = 1.0
NEAR_CHECK_SECONDS = 0.01
"""Within twice the reserve, free space is read every 10 ms: a busy writer can use up a small
volume's last megabytes in well under a second."""


class DiskStatus(msgspec.Struct, frozen=True):
    path: str
    free_bytes: int
    total_bytes: int
    reserve_bytes: int

    @property
    def low(self) -> bool:
        return self.free_bytes < self.reserve_bytes


def reserve_bytes(total_bytes: int, reserve_mb: int | None) -> int:
    """The configured reserve, else min(1 GB, 5% of the volume)."""
    if reserve_mb is not None:
        return reserve_mb * MB
    return min(DEFAULT_RESERVE_BYTES, int(total_bytes * DEFAULT_RESERVE_FRACTION))


def read_status(path: Path, reserve_mb: int | None) -> DiskStatus:
    stats = os.statvfs(path)
    total = stats.f_blocks * stats.f_frsize
    return DiskStatus(
        str(path), stats.f_bavail * stats.f_frsize, total, reserve_bytes(total, reserve_mb)
    )


class DiskReserve:
    """One worker's view of the reserve: cheap to ask on every ingestion request."""

    def __init__(
        self,
        path: Path | None,
        reserve_mb: int | None,
        clock: Callable[[], float] = time.monotonic,
        read: Callable[[Path, int | None], DiskStatus] = read_status,
    ) -> None:
        self.path = path
        """The volume's folder; None when there is nothing to watch (PostgreSQL, reserve 0)."""
        self.reserve_mb = reserve_mb
        self._clock = clock
        self._read = read
        self._next = 0.0
        self._status: DiskStatus | None = None
        self._low = False

    def status(self) -> DiskStatus | None:
        """The last reading, renewed when older than :data:`CHECK_SECONDS` (or
        :data:`NEAR_CHECK_SECONDS` within twice the reserve)."""
        if self.path is None:
            return None
        now = self._clock()
        if now >= self._next:
            try:
                self._status = self._read(self.path, self.reserve_mb)
            except OSError:
                self._status = None  # a missing folder is the store's to report
            status = self._status
            near = status is not None and status.free_bytes < 2 * status.reserve_bytes
            self._next = now + (NEAR_CHECK_SECONDS if near else CHECK_SECONDS)
            self._episode()
        return self._status

    def low(self) -> bool:
        """Whether ingestion must be refused now."""
        if self.path is None:
            return False
        if self._clock() >= self._next:
            self.status()
        return self._low

    def _episode(self) -> None:
        """Log once when free space falls below the reserve, and once when it is back."""
        status = self._status
        low = status is not None and status.low
        if low == self._low:
            return
        self._low = low
        if status is None:
            return
        fields = {
            "path": status.path,
            "free_mb": round(status.free_bytes / MB, 1),
            "reserve_mb": round(status.reserve_bytes / MB, 1),
        }
        if low:
            logs.log(
                logging.ERROR,
                "free disk space is below the reserve: ingestion is refused (503) until space "
                "is freed (delete files, set a project's event retention, or grow the volume)",
                **fields,
            )
        else:
            logs.log(logging.WARNING, "free disk space is above the reserve again", **fields)


def data_volume(sqlite_path: Path | None, reserve_mb: int | None) -> DiskReserve:
    """The reserve of the store's volume: its SQLite file's folder; none on PostgreSQL."""
    watched = sqlite_path.parent if sqlite_path is not None and reserve_mb != 0 else None
    return DiskReserve(watched, reserve_mb)


def reserve_reason(disk: DiskReserve) -> str | None:
    """Why ``/_ready`` must say no, when free space is below the reserve."""
    status = disk.status()
    if status is None or not status.low:
        return None
    return (
        f"free disk space is below its reserve ({status.free_bytes // MB} MB free, "
        f"{status.reserve_bytes // MB} MB reserved): ingestion is refused"
    )


def disk_gauges(disk: DiskReserve) -> str:
    """Prometheus gauges of the data volume, read now (nothing on PostgreSQL)."""
    status = disk.status()
    if status is None:
        return ""
    return (
        "# HELP flagstaff_data_volume_free_bytes Free space on the SQLite store's volume.\n"
        "# TYPE flagstaff_data_volume_free_bytes gauge\n"
        f"flagstaff_data_volume_free_bytes {status.free_bytes}\n"
        "# HELP flagstaff_data_volume_reserve_bytes Below this free space, ingestion is refused.\n"
        "# TYPE flagstaff_data_volume_reserve_bytes gauge\n"
        f"flagstaff_data_volume_reserve_bytes {status.reserve_bytes}\n"
    )
