"""Keeps the service's helper processes alive: a child that dies is started again.

``flagstaff serve`` runs granian's workers (granian supervises those) beside helper processes
of its own: today the SQLite ingest writer. :class:`Supervisor` starts each from a
:class:`ChildSpec`, watches them from a thread of the serving process, and restarts one that
exits within :data:`FIRST_DELAY_SECONDS`; a child that keeps dying soon after its start is
restarted after a delay that doubles up to :data:`MAX_DELAY_SECONDS`, and one that stayed up
:data:`STABLE_AFTER_SECONDS` starts from the short delay again. Each death is logged (once) with its
exit status, and each restart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import select
import subprocess
import threading
import time
from collections.abc import Callable

from flagstaff.ops import logs

FIRST_DELAY_SECONDS = 0.2
MAX_DELAY_SECONDS = 30.0
STABLE_AFTER_SECONDS = 30.0
POLL_SECONDS = 0.05
READY_TIMEOUT_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class ChildSpec:
    """How to start one helper process and know it is serving."""

    name: str
    argv: list[str]
    ready_line: bytes | None = b"ready\n"
    """The line the child prints on stdout once it serves (None: serving once started)."""
    stop: Callable[[subprocess.Popen[bytes]], None] | None = None
    """How to stop it gracefully (default: SIGTERM, then SIGKILL after 10 s)."""


class ChildFailed(RuntimeError):
    """A child exited, or said something else, before it was ready."""


@dataclasses.dataclass
class _Running:
    spec: ChildSpec
    proc: subprocess.Popen[bytes]
    started: float
    delay: float = FIRST_DELAY_SECONDS
    restart_at: float | None = None
    restarts: int = 0


class Supervisor:
    """The helper processes of one ``flagstaff serve`` and the thread that restarts them."""

    def __init__(self, on_restart: Callable[[str, int], None] | None = None) -> None:
        self._children: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_restart = on_restart

    def start(self, spec: ChildSpec) -> subprocess.Popen[bytes]:
        """Start ``spec`` and wait until it is ready (:class:`ChildFailed` if it is not);
        from then on it is restarted whenever it dies, until :meth:`stop`."""
        proc = _spawn(spec)
        with self._lock:
            self._children[spec.name] = _Running(spec, proc, time.monotonic())
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)
            self._thread.start()
        return proc

    def process(self, name: str) -> subprocess.Popen[bytes] | None:
        with self._lock:
            running = self._children.get(name)
        return None if running is None else running.proc

    def restarts(self, name: str) -> int:
        with self._lock:
            running = self._children.get(name)
        return 0 if running is None else running.restarts

    def stop(self) -> None:
        """Stop watching, then stop every child gracefully (last started first)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            children = list(self._children.values())[::-1]
            self._children.clear()
        for running in children:
            if running.proc.poll() is None:
                (running.spec.stop or _terminate)(running.proc)

    def _watch(self) -> None:
        while not self._stopping.wait(POLL_SECONDS):
            with self._lock:
                children = list(self._children.values())
            for running in children:
                if self._stopping.is_set():
                    return
                self._check(running)

    def _check(self, running: _Running) -> None:
        now = time.monotonic()
        if running.restart_at is None:
            code = running.proc.poll()
            if code is None:
                return
            if now - running.started >= STABLE_AFTER_SECONDS:
                running.delay = FIRST_DELAY_SECONDS
            running.restart_at = now + running.delay
            logs.always(
                logging.ERROR,
                f"the {running.spec.name} process exited ({_status(code)}): restarting it",
                child=running.spec.name,
                exit_status=code,
                restart_in_seconds=round(running.delay, 3),
            )
            return
        if now < running.restart_at:
            return
        try:
            proc = _spawn(running.spec, self._stopping)
        except ChildFailed as exc:
            running.delay = min(running.delay * 2, MAX_DELAY_SECONDS)
            running.restart_at = time.monotonic() + running.delay
            logs.always(
                logging.ERROR,
                f"the {running.spec.name} process did not start again: {exc}",
                child=running.spec.name,
                restart_in_seconds=round(running.delay, 3),
            )
            return
        with self._lock:
            running.proc = proc
            running.started = time.monotonic()
            running.restart_at = None
            running.restarts += 1
            # It died soon after its last start: wait longer next time.
            running.delay = min(running.delay * 2, MAX_DELAY_SECONDS)
        logs.always(
            logging.WARNING,
            f"the {running.spec.name} process is running again",
            child=running.spec.name,
            pid=proc.pid,
            restarts=running.restarts,
        )
        if self._on_restart is not None:
            self._on_restart(running.spec.name, running.restarts)


def _spawn(spec: ChildSpec, stopping: threading.Event | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(spec.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    if spec.ready_line is None:
        return proc
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or (stopping is not None and stopping.is_set()):
            _kill(proc)
            raise ChildFailed("it did not say it was ready in time")
        readable, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
        if not readable:
            continue
        # Popen's pipes are typed IO[bytes]; unbuffered=False makes them BufferedReaders.
        chunk = proc.stdout.read1(64)  # type: ignore[attr-defined]
        if not chunk:
            break
        line += chunk
    if line != spec.ready_line:
        _kill(proc)
        raise ChildFailed(f"it exited or answered {line[:80]!r} instead of being ready")
    return proc


def _status(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    proc.wait()
