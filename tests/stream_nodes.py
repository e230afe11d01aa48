"""``flagstaff consume`` processes for the stream tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.server import free_port


def stream_env(database_url: str, stream_url: str, **extra: str) -> dict[str, str]:
    """The settings of capture nodes and consumers of one stream (short timeouts for tests)."""
    return {
        "FLAGSTAFF_DATABASE_URL": database_url,
        "FLAGSTAFF_STREAM_URL": stream_url,
        "FLAGSTAFF_STREAM_PUBLISH_TIMEOUT": "3",
        "FLAGSTAFF_STREAM_LEASE_SECONDS": "4",
        **extra,
    }


@dataclass
class ConsumerProcess:
    log_path: Path
    env: dict[str, str]
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ConsumerProcess:
        if not self.port:
            self.port = free_port()
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "flagstaff", "consume", "--port", str(self.port)],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"consumer exited early:\n{self.logs()}")
            try:
                if httpx.get(self.url + "/_health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"consumer did not start:\n{self.logs()}")

    def ready(self) -> dict[str, Any]:
        return httpx.get(self.url + "/_ready", timeout=30.0).json()  # type: ignore[no-any-return]

    def metrics(self) -> dict[str, float]:
        text = httpx.get(self.url + "/metrics", timeout=30.0).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """kill -9."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""
