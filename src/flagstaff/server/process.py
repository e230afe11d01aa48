"""The service's processes: the SQLite ingest writer (one per data dir) and granian's workers,
started by ``flagstaff serve`` once the store is bootstrapped."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile

from flagstaff import __version__
from flagstaff.ops import logs
from flagstaff.server.config import Settings
from flagstaff.server.supervisor import ChildFailed, ChildSpec, Supervisor

INTERFACE_ENV = "FLAGSTAFF_INTERFACE"
"""``asgi`` serves through granian's ASGI interface instead of RSGI (for A/B measurements)."""


FILES_RESERVE = 256
"""Open files a worker keeps for itself (database, ingest socket, GeoIP, logs) besides its
connections."""


def connection_bound(wanted: int, open_files: int | None) -> int:
    """The connections a worker may accept: ``wanted``, or fewer when its open-files limit
    (``None``: unlimited) would run out first. Past that limit granian's accept loop fails and
    retries at once, spinning a core while the backlog waits."""
    if open_files is None:
        return wanted
    return max(16, min(wanted, open_files - FILES_RESERVE))


def serve(settings: Settings) -> int:
    """Serve until SIGTERM or SIGINT: the SQLite ingest writer first (when the store is SQLite),
    then granian's workers, each building :func:`flagstaff.app.create_app`."""
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings

    shutil.rmtree(settings.data_dir / "metrics", ignore_errors=True)
    children = Supervisor()
    if settings.database_url is None:
        socket_path = _start_ingest_writer(settings, children)
        settings = dataclasses.replace(settings, ingest_socket=socket_path)
    os.environ.update(settings.to_env())
    connections = connection_bound(settings.max_connections, _open_files_limit())
    if connections < settings.max_connections:
        logs.always(
            logging.WARNING,
            f"the open-files limit allows {connections} connections per worker, not "
            f"{settings.max_connections}: raise it (ulimit -n, LimitNOFILE=)",
            max_connections=connections,
        )
    logs.log(
        logging.INFO,
        f"flagstaff {__version__} listening on http://{settings.host}:{settings.port}",
        version=__version__,
        url=f"http://{settings.host}:{settings.port}",
        workers=settings.workers,
        store="postgresql" if settings.database_url else "sqlite",
        sqlite_path=None if settings.database_url else str(settings.sqlite_path),
        access_log=settings.access_log,
        geoip=_geoip_status(settings),
        stream=[u.rsplit("@", 1)[-1] for u in settings.stream_urls] or None,  # no credentials
    )
    server = Granian(
        "flagstaff.app:create_app",
        factory=True,
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI if os.environ.get(INTERFACE_ENV) == "asgi" else Interfaces.RSGI,
        loop=Loops.uvloop,
        workers=settings.workers,
        websockets=False,
        log_enabled=settings.log_level == "debug",
        backlog=2048,
        # HTTP/1 only: the auto mode's protocol sniffing waits without a timeout for the first
        # bytes, so a connection that sends nothing held its slot for ever.
        http=HTTPModes.http1,
        backpressure=connections,
        http1_settings=HTTP1Settings(header_read_timeout=settings.header_timeout_ms),
        # A worker that dies (killed, out of memory) is started again by granian; one that
        # keeps dying within 5.5 s of its restart stops the service (a crash loop).
        respawn_failed_workers=True,
        # SIGTERM: each worker drains (server.draining), then finishes what is in flight;
        # one still busy after this long is killed.
        workers_kill_timeout=settings.shutdown_timeout_seconds
        + math.ceil(settings.shutdown_grace_seconds),
    )
    try:
        server.serve()
    finally:
        children.stop()
    return 0


def _open_files_limit() -> int | None:
    """This process's open-files limit after raising it to the hard limit (workers inherit it);
    None when unlimited or unknown."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return None if soft == resource.RLIM_INFINITY else soft


def _geoip_status(settings: Settings) -> str:
    """The GeoIP database the workers will open, or "off"; says once how to get one."""
    from flagstaff.server.geoip import default_database_path

    if settings.geoip_disable:
        return "off"
    path = settings.geoip_path or default_database_path()
    if path is None or not os.path.exists(path):
        logs.log(
            logging.WARNING,
            "no GeoIP database found, so events and /flags get no $geoip_* properties: "
            "run scripts/fetch-geoip.sh in a source checkout, or set FLAGSTAFF_GEOIP_PATH to a "
            "MaxMind-format .mmdb file or folder (FLAGSTAFF_GEOIP_DISABLE=true turns it off)",
            geoip_path=path,
        )
        return "off"
    return path


def _start_ingest_writer(settings: Settings, children: Supervisor) -> str:
    """Start the data dir's single ingest writer (restarted by ``children`` whenever it dies:
    the workers reconnect to the same socket) and wait until its socket answers."""
    socket_path = _ingest_socket_path(settings)
    spec = ChildSpec(
        "ingest writer",
        [
            sys.executable,
            "-m",
            "flagstaff.store.sqlite.ingestd",
            str(settings.sqlite_path),
            socket_path,
            str(settings.sqlite_mmap_mb),
            str(settings.person_cache_mb),
        ],
        stop=_stop_ingest_writer,
    )
    try:
        children.start(spec)
    except ChildFailed:
        raise SystemExit(
            "flagstaff: the ingest writer did not start (see the messages above)"
        ) from None
    return socket_path


_SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes on Linux, 104 on the BSDs


def _ingest_socket_path(settings: Settings) -> str:
    """In the data dir, so a killed service leaves nothing in /tmp (the writer replaces a
    stale socket once it holds the data dir's lock); a temporary name when that path is too
    long for a Unix socket."""
    path = os.path.abspath(settings.data_dir / "ingest.sock")
    if len(path.encode()) <= _SOCKET_PATH_MAX:
        return path
    return os.path.join(
        tempfile.gettempdir(), f"flagstaff-{os.getpid()}-{secrets.token_hex(4)}.sock"
    )


def _stop_ingest_writer(proc: subprocess.Popen[bytes]) -> None:
    """Close its stdin: it finishes what is queued, commits and exits."""
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
