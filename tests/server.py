"""Start the real Flagstaff server in a subprocess on a free port, for API and e2e tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests import pg

PROJECT_TOKEN = "phc_testprojecttoken0000000000000000000000"
PERSONAL_KEY = "phx_testpersonalkey00000000000000000000000"
BACKEND_ENV = "FLAGSTAFF_TEST_BACKEND"
DATABASE_URL_ENV = "FLAGSTAFF_DATABASE_URL"


def storage_backend() -> str:
    """The storage backend the tests' servers use: ``sqlite`` (default) or ``postgres``."""
    backend = os.environ.get(BACKEND_ENV, "sqlite").strip().lower() or "sqlite"
    if backend not in ("sqlite", "postgres"):
        raise RuntimeError(f"{BACKEND_ENV} must be sqlite or postgres, not {backend!r}")
    return backend


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    data_dir: Path
    port: int = 0
    workers: int = 1
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    database_url: str | None = None

    def _backend_env(self) -> dict[str, str]:
        """Under the postgres backend: a fresh database of ``tests/pg.py`` for this server.

        Chosen at the first start and kept across restarts; a database URL in ``env`` (the
        test's own choice, e.g. nodes sharing one) wins.
        """
        if DATABASE_URL_ENV in self.env:
            return {}
        if self.database_url is None:
            if storage_backend() != "postgres":
                return {}
            self.database_url = pg.new_database()
        return {DATABASE_URL_ENV: self.database_url}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Server:
        if not self.port:
            self.port = free_port()
        env = {
            **os.environ,
            "FLAGSTAFF_INIT_PROJECT_TOKEN": PROJECT_TOKEN,
            "FLAGSTAFF_INIT_PERSONAL_API_KEY": PERSONAL_KEY,
            "FLAGSTAFF_DEFINITIONS_REFRESH_SECONDS": "0.2",
            # A stop drains for this long (server.draining); tests that stop under load set
            # their own.
            "FLAGSTAFF_SHUTDOWN_GRACE_SECONDS": "0.1",
            **self._backend_env(),
            **self.env,
        }
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flagstaff",
                "serve",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
                "--workers",
                str(self.workers),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.logs()}")
            try:
                if httpx.get(self.url + "/_ready", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not become ready:\n{self.logs()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def kill(self) -> None:
        """Crash the whole service at once: SIGKILL to the server and all its workers."""
        if self.proc is None:
            return
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def logs(self) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-5000:]
        return ""


class Api:
    """A management API client with the test project's personal key."""

    def __init__(self, base: str, key: str = PERSONAL_KEY) -> None:
        self.client = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30.0
        )

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.client.get(path, **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> httpx.Response:
        return self.client.post(path, json=json, **kw)

    def patch(self, path: str, json: Any = None, **kw: Any) -> httpx.Response:
        return self.client.patch(path, json=json, **kw)

    def delete(self, path: str, **kw: Any) -> httpx.Response:
        return self.client.delete(path, **kw)

    def create_flag(self, **flag: Any) -> dict[str, Any]:
        r = self.post("/api/projects/@current/feature_flags/", json=flag)
        assert r.status_code == 201, r.text
        return r.json()

    def create_person_flag(self, key: str, prop: str, value: str) -> dict[str, Any]:
        """A flag on for every person whose property ``prop`` is exactly ``value``."""
        condition = {"key": prop, "value": [value], "operator": "exact", "type": "person"}
        return self.create_flag(
            key=key,
            filters={"groups": [{"properties": [condition], "rollout_percentage": 100}]},
        )
