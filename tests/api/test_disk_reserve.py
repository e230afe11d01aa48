"""A full disk, for real: the server's data dir on a small tmpfs the test mounts (it must run
as root; it fails, saying why, when it cannot mount). Filled below the free-space reserve,
ingestion answers 503 with ``Retry-After`` and a JSON body, ``/_ready`` says why, the refusal
is counted and logged once, and the management API, the console and flags keep working; with
space back, ingestion resumes, and every acknowledged event is stored.

On PostgreSQL the events go to the database server's volume, not this one: the reserve does
not apply, and the same filled volume refuses nothing (``server/disk.py``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.retention_load import Sender, exported, wait_for
from tests.server import Api, Server, storage_backend

SIZE_MB = 256
RESERVE_MB = SIZE_MB * 5 / 100  # the default: min(1 GB, 5% of the volume)
# Large enough that the reserve (12.8 MB) holds what SQLite may still write once ingestion
# stops: a checkpoint moves up to the WAL's 4 MB into the database file.


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "volume"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs: run it as root (CI does)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.fail(f"could not mount a tmpfs for the full-disk test: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _free(volume: Path) -> int:
    stats = os.statvfs(volume)
    return stats.f_bavail * stats.f_frsize


def _fill(volume: Path, leave_mb: float) -> Path:
    """A file that leaves about ``leave_mb`` free on the volume, while the server writes too."""
    filler = volume / "filler"
    target = int(leave_mb * 1024 * 1024)
    with filler.open("ab") as out:
        while (free := _free(volume)) > target:
            try:
                out.write(b"\0" * min(1 << 20, free - target))
                out.flush()
            except OSError:  # the server took the last bytes first: give one back
                out.truncate(max(0, out.tell() - (1 << 20)))
                break
    return filler


def test_ingestion_stops_at_the_reserve_and_resumes(volume: Path) -> None:
    postgres = storage_backend() == "postgres"
    server = Server(volume / "data").start()
    try:
        api = Api(server.url)
        sender = Sender(server, batch=20, pause=0.05)
        sender.start()
        wait_for(lambda: len(sender.acknowledged) >= 200, 30, "events to be ingested")
        # Half the reserve left: near the reserve a worker reads free space every 10 ms, so
        # ingestion stops before the sender uses up the rest.
        filler = _fill(volume, leave_mb=RESERVE_MB / 2)
        batch = {"api_key": "phc_testprojecttoken0000000000000000000000", "batch": []}
        batch["batch"] = [{"event": "refused?", "distinct_id": "d", "properties": {}}]
        if postgres:
            # Not our volume: nothing refused, nothing to report.
            answer = httpx.post(f"{server.url}/batch/", json=batch)
            assert answer.status_code == 200, answer.text
            assert httpx.get(f"{server.url}/_ready").status_code == 200
        else:

            def refused() -> httpx.Response | None:
                answer = httpx.post(f"{server.url}/batch/", json=batch)
                return answer if answer.status_code == 503 else None

            answer = wait_for(refused, 10, "ingestion to be refused")
            assert answer.headers["retry-after"].isdigit()
            body = answer.json()
            assert body["code"] == "insufficient_storage" and "reserve" in body["detail"]
            ready = httpx.get(f"{server.url}/_ready")
            assert ready.status_code == 503 and "reserve" in ready.json()["detail"]
            assert httpx.get(f"{server.url}/_health").status_code == 200
            metrics = httpx.get(f"{server.url}/metrics").text
            assert 'flagstaff_ingest_refused_total{reason="disk_reserve"}' in metrics
            assert "flagstaff_data_volume_reserve_bytes" in metrics
        # The management API (a write included), flags and the console keep working.
        flag = api.create_flag(key="while-full", filters={"groups": [{"rollout_percentage": 100}]})
        assert flag["key"] == "while-full"
        flags = httpx.post(f"{server.url}/flags/?v=2", json={**batch, "distinct_id": "d"})
        assert flags.status_code == 200 and "while-full" in flags.json()["flags"]
        assert httpx.get(f"{server.url}/login").status_code == 200
        filler.unlink()

        def accepted() -> bool:
            return httpx.post(f"{server.url}/batch/", json=batch).status_code == 200

        wait_for(accepted, 10, "ingestion to resume")
        assert httpx.get(f"{server.url}/_ready").status_code == 200
        wait_for(lambda: sender.statuses.get(200, 0) > 5, 10, "the sender to be answered")
        sender.finish()
        if not postgres:
            assert sender.statuses.get(503, 0) > 0, sender.statuses
        assert set(sender.statuses) <= {200, 503}, sender.statuses
    finally:
        server.stop()
    assert server.log_path is not None
    logs = server.log_path.read_text(errors="replace")
    if not postgres:
        assert logs.count("free disk space is below the reserve") == 1, logs
        assert logs.count("free disk space is above the reserve again") == 1, logs
        assert '"status":503' not in logs  # not one line per refused request
    assert sender.acknowledged <= exported(server).keys()
