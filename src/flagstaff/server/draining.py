"""A worker's graceful stop: answer, close, then stop accepting.

On SIGTERM granian stops a worker at once: it stops accepting and closes every idle keep-alive
connection, and a client that sent its next request on such a connection just then sees it
reset. So a worker first *drains* for ``shutdown_grace_seconds``: it keeps accepting and
answering, every answer says ``Connection: close`` (the client opens a new connection for its
next request instead of reusing this one) and ``/_ready`` answers 503 (a load balancer stops
sending). Then it hands over to granian's own stop (SIGINT to itself), which finishes the
requests in flight; ``flagstaff serve`` kills a worker still busy after
``shutdown_timeout_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import struct
import sys

from flagstaff.ops import logs

SETTLE_SECONDS = 0.5
"""Between closing the door and granian's stop: time for the connections already made (the
accept queue included) to be accepted and to send their request, so that none is idle when
granian closes the idle ones."""
_SO_ATTACH_FILTER = 26
_DROP_ALL = (ctypes.c_uint64 * 1)(0x0000000000000006)
"""One classic BPF instruction, ``ret #0``: drop every packet (code 0x06, k 0)."""


class Draining:
    """This worker's stop state (one per process)."""

    def __init__(self) -> None:
        self.active = False
        self.port = 0

    def install(self, loop: asyncio.AbstractEventLoop, grace_seconds: float, port: int) -> None:
        """Take SIGTERM over from granian (its handler stays on SIGINT)."""
        self.port = port
        try:
            loop.add_signal_handler(signal.SIGTERM, self.begin, loop, grace_seconds)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            return

    def begin(self, loop: asyncio.AbstractEventLoop, grace_seconds: float) -> None:
        if self.active:
            return
        self.active = True
        logs.log(
            logging.INFO,
            "stopping: answering with Connection: close, then stopping to accept",
            pid=os.getpid(),
            grace_seconds=grace_seconds,
        )
        loop.call_later(grace_seconds, self._close_door, loop)

    def _close_door(self, loop: asyncio.AbstractEventLoop) -> None:
        """Refuse new connections, let the ones made send their requests, then stop."""
        closed = close_door(self.port)
        loop.call_later(SETTLE_SECONDS if closed else 0, os.kill, os.getpid(), signal.SIGINT)

    async def check(self) -> str | None:
        """The readiness check: a stopping worker is not ready."""
        return "the server is shutting down" if self.active else None


DRAINING = Draining()


def close_door(port: int) -> bool:
    """Make this worker's listening socket drop new connection attempts (a socket filter that
    drops every packet: the handshakes of new clients never complete, so they retry or see
    the port closed, and never send a request into a connection about to close), while the
    connections already established, in the accept queue too, are accepted and answered.
    granian (one SO_REUSEPORT listener per worker) offers no way to stop accepting without
    closing. Linux only; False when it could not be done."""
    if sys.platform != "linux" or not port:
        return False
    program = struct.pack("HL", len(_DROP_ALL), ctypes.addressof(_DROP_ALL))
    done = False
    for sock in _listeners(port):
        with contextlib.suppress(OSError), sock:
            sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, program)
            done = True
    return done


def _listeners(port: int) -> list[socket.socket]:
    """This process's listening TCP sockets on ``port`` (duplicates, to be closed)."""
    found = []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            with contextlib.suppress(OSError):
                if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                    continue
                sock = socket.socket(fileno=os.dup(fd))
                try:
                    listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                    local = sock.getsockname()
                    if listening and isinstance(local, tuple) and local[1] == port:
                        found.append(sock)
                        continue
                except OSError:
                    pass
                sock.close()
    return found
