"""A PostgreSQL for the tests: the one named by ``FLAGSTAFF_TEST_DATABASE_URL``, or our own.

Without the variable, the first call starts a private server from Debian's binaries
(``/usr/lib/postgresql/<version>/bin``): ``initdb`` into a temporary directory, ``pg_ctl``
on a free port with ``fsync=on``. As root it runs them as the ``postgres`` user (initdb
refuses root). Either way each test session gets databases of its own, dropped (and our
server stopped) when the process exits.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ENV_URL = "FLAGSTAFF_TEST_DATABASE_URL"
_SUPERUSER = "flagstaff"
_PREFIX = "flagstaff-pg-"
_OWNER = "owner.pid"
_INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) were not found: install them with "
    "`apt-get install postgresql`, or point FLAGSTAFF_TEST_DATABASE_URL at a server"
)


class _Server:
    """A throwaway cluster: data, socket and log in one temporary directory."""

    def __init__(self) -> None:
        self.bindir = _find_bindir()
        self.as_user = "postgres" if os.geteuid() == 0 else None
        _sweep_orphans(self.bindir, self.as_user)
        self.root = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=_shared_tmp()))
        (self.root / _OWNER).write_text(str(os.getpid()))
        if self.as_user is not None:
            entry = pwd.getpwnam(self.as_user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.port = _free_port()
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.options = ""

    def _run(self, *args: str | Path) -> None:
        command = [str(a) for a in args]
        if self.as_user is not None:
            command = ["runuser", "-u", self.as_user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd="/", check=False)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
                f"\n{log[-4000:]}"
            )

    def start(self) -> str:
        self._run(
            self.bindir / "initdb",
            "-D",
            self.data,
            "-U",
            _SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        self.resume()
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def resume(self) -> None:
        """Start the server on its data directory (again, after :meth:`crash`: crash
        recovery replays the WAL)."""
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.root} -c fsync=on -c max_connections=200"
        )
        self.options = options
        self._run(
            self.bindir / "pg_ctl", "-D", self.data, "-l", self.log, "-o", options, "-w", "start"
        )

    def stop(self) -> None:
        try:
            self._run(self.bindir / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def restart_fast(self) -> None:
        """``pg_ctl restart -m fast``: sessions are ended, the server is down a moment."""
        # -l again: without it the new postmaster writes to (and holds) pg_ctl's stdout.
        self._run(
            self.bindir / "pg_ctl", "-D", self.data, "-l", self.log, "-m", "fast", "-w", "restart"
        )

    def crash(self) -> None:
        """kill -9 of the postmaster (its backends exit when they see it gone)."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)


@contextlib.contextmanager
def private_cluster() -> Iterator[tuple[_Server, str]]:
    """A PostgreSQL cluster of the caller's own (to restart or crash), and the URL of an
    empty database on it; stopped and removed on exit."""
    server = _Server()
    admin = server.start()
    try:
        _admin(admin, 'CREATE DATABASE "faults"')
        yield server, _with_database(admin, "faults")
    finally:
        server.stop()


def _sweep_orphans(bindir: Path, as_user: str | None) -> None:
    """Stop servers of test runs that died without cleaning up (killed by a signal)."""
    for root in Path(_shared_tmp()).glob(_PREFIX + "*"):
        try:
            owner = int((root / _OWNER).read_text())
        except (OSError, ValueError):
            continue
        if _alive(owner):
            continue
        command = [str(bindir / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "stop"]
        if as_user is not None:
            command = ["runuser", "-u", as_user, "--", *command]
        subprocess.run(command, capture_output=True, cwd="/", check=False)
        shutil.rmtree(root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _find_bindir() -> Path:
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    raise RuntimeError(_INSTALL_HINT)


def _shared_tmp() -> str:
    """A temporary directory another user (postgres) can reach: not a private per-user one."""
    base = tempfile.gettempdir()
    return base if os.stat(base).st_mode & 0o001 else "/tmp"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


async def _execute(url: str, sql: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _admin(url: str, sql: str) -> None:
    """Run ``sql`` to completion, also when called from inside a running event loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _execute(url, sql)).result()


class _Harness:
    def __init__(self) -> None:
        self.server: _Server | None = None
        self.admin_url: str | None = None
        self.databases: list[str] = []
        self.session_url: str | None = None

    def admin(self) -> str:
        if self.admin_url is None:
            given = os.environ.get(ENV_URL)
            atexit.register(self.shutdown)
            if given:
                self.admin_url = given
            else:
                self.server = _Server()
                self.admin_url = self.server.start()
        return self.admin_url

    def create(self) -> str:
        admin = self.admin()
        name = f"flagstaff_test_{os.getpid()}_{uuid.uuid4().hex[:10]}"
        _admin(admin, f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return _with_database(admin, name)

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
            return
        if self.admin_url is None:
            return
        for name in self.databases:
            with contextlib.suppress(OSError, asyncpg.PostgresError):
                _admin(self.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.databases.clear()


_HARNESS = _Harness()


def postgres_url() -> str:
    """The URL of this test session's database (created on first call, dropped at exit)."""
    if _HARNESS.session_url is None:
        _HARNESS.session_url = _HARNESS.create()
    return _HARNESS.session_url


class PrivateServer:
    """A PostgreSQL of one test module's own, always started here (whatever the backend), which
    the test may crash and start again: ``url``, :meth:`crash`, :meth:`resume`, :meth:`close`."""

    def __init__(self) -> None:
        self._server = _Server()
        self.url = self._server.start()

    def crash(self) -> None:
        self._server.crash()

    def resume(self) -> None:
        self._server.resume()

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # already stopped by a crash
            self._server.stop()


def new_database() -> str:
    """The URL of another empty database of this session (for tests that need a fresh one)."""
    return _HARNESS.create()
