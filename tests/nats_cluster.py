"""A NATS JetStream cluster for the tests: ``nats-server`` processes on loopback ports (a
lone server when ``size`` is 1).

Each server keeps its JetStream data in a temporary directory and routes to the others
(``--cluster``/``--routes``), so streams can have 3 replicas. ``kill(i)`` is a kill -9 of one
server; ``start(i)`` brings it back on the same ports and data.
"""

from __future__ import annotations

import atexit
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

_BINARY_HINT = "nats-server was not found: install it with `apt-get install nats-server`"


def nats_binary() -> str:
    found = shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if Path("/usr/sbin/nats-server").exists() else None
    )
    if found is None:
        raise RuntimeError(_BINARY_HINT)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class NatsCluster:
    size: int = 3
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="flagstaff-nats-")))
    client_ports: list[int] = field(default_factory=list)
    cluster_ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes] | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        atexit.register(self.stop)  # a test that fails before its own clean-up
        self.client_ports = [_free_port() for _ in range(self.size)]
        self.cluster_ports = [_free_port() for _ in range(self.size)]
        self.procs = [None] * self.size

    @property
    def url(self) -> str:
        """Every server's client URL, comma separated (what ``--stream-url`` takes)."""
        return ",".join(f"nats://127.0.0.1:{p}" for p in self.client_ports)

    def start(self, index: int | None = None, timeout: float = 20.0) -> NatsCluster:
        indexes = range(self.size) if index is None else [index]
        routes = ",".join(f"nats://127.0.0.1:{p}" for p in self.cluster_ports)
        for i in indexes:
            data = self.root / f"n{i}"
            data.mkdir(parents=True, exist_ok=True)
            log = (self.root / f"n{i}.log").open("ab")
            command = [
                nats_binary(),
                "-a",
                "127.0.0.1",
                "-p",
                str(self.client_ports[i]),
                "-n",
                f"n{i}",
                "-js",
                "-sd",
                str(data),
            ]
            if self.size > 1:
                command += [
                    "--cluster_name",
                    "flagstaff-test",
                    "--cluster",
                    f"nats://127.0.0.1:{self.cluster_ports[i]}",
                    "--routes",
                    routes,
                ]
            self.procs[i] = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        for i in indexes:
            while not _listening(self.client_ports[i]):
                proc = self.procs[i]
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"nats-server n{i} exited:\n{self.logs(i)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nats-server n{i} did not listen:\n{self.logs(i)}")
                time.sleep(0.05)
        return self

    def kill(self, index: int) -> None:
        """kill -9 of one server."""
        proc = self.procs[index]
        if proc is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.procs[index] = None

    def stop(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                self.procs[i] = None
        shutil.rmtree(self.root, ignore_errors=True)

    def logs(self, index: int) -> str:
        path = self.root / f"n{index}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""
