"""What the retention, backup and full-disk tests share: events sent as an SDK would, a sender
that keeps ingesting in a thread and remembers what was acknowledged, and the stored events
read back with ``flagstaff events export`` as an operator would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from tests.server import DATABASE_URL_ENV, PROJECT_TOKEN, Server

DAY_MS = 86_400_000
PADDING = "x" * 600
"""About the size of a real event's properties (450-750 bytes stored per event)."""


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def events_at(timestamps: list[int], tag: str) -> list[dict[str, Any]]:
    """Events with these timestamps (kept as sent: no ``sent_at``), each a new uuid."""
    return [
        {
            "event": "retention test",
            "distinct_id": f"{tag}-{i % 50}",
            "uuid": str(uuid.uuid4()),
            "timestamp": iso(ts),
            "properties": {"tag": tag, "i": i, "padding": PADDING},
        }
        for i, ts in enumerate(timestamps)
    ]


def send(server: Server, batch: list[dict[str, Any]], client: httpx.Client | None = None) -> int:
    body = {"api_key": PROJECT_TOKEN, "batch": batch}
    if client is None:
        return httpx.post(f"{server.url}/batch/", json=body, timeout=60).status_code
    return client.post(f"{server.url}/batch/", json=body).status_code


class Sender(threading.Thread):
    """Sends batches of current events until stopped; keeps the uuids answered 200."""

    def __init__(self, server: Server, batch: int = 50, pause: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.batch = batch
        self.pause = pause
        self.acknowledged: set[str] = set()
        self.statuses: dict[int, int] = {}
        self.stop_event = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            n = 0
            while not self.stop_event.is_set():
                now = int(time.time() * 1000)
                batch = events_at([now] * self.batch, f"live{n}")
                n += 1
                try:
                    status = send(self.server, batch, client)
                except httpx.HTTPError:
                    status = 0
                self.statuses[status] = self.statuses.get(status, 0) + 1
                if status == 200:
                    self.acknowledged.update(e["uuid"] for e in batch)
                    time.sleep(self.pause)
                else:
                    time.sleep(0.05)

    def finish(self) -> None:
        self.stop_event.set()
        self.join(60)


def cli_env(server: Server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGSTAFF_")}
    if server.database_url:
        env[DATABASE_URL_ENV] = server.database_url
    return env


def cli(
    server: Server, *args: str, data_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flagstaff", *args, "--data-dir", str(data_dir or server.data_dir)],
        env=cli_env(server),
        capture_output=True,
        text=True,
        timeout=120,
    )


def exported(server: Server, data_dir: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every stored event by uuid, read with ``flagstaff events export``."""
    done = cli(server, "events", "export", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    events = (json.loads(line) for line in done.stdout.splitlines() if line)
    return {e["uuid"]: e for e in events}


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
