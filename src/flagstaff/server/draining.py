"""A worker's graceful stop: answer, close, then stop accepting.

On SIGTERM granian stops a worker at once: it stops accepting and closes every idle keep-alive
connection, and a client that sent its next request on such a connection just then sees it
reset. So a worker first *drains* for ``shutdown_grace_seconds``: it keeps accepting and
answering, every answer says ``Connection: close`` (the client opens a new connection for its
next request instead of reusing this one) and ``/_ready`` answers 503 (a load balancer stops
sending). Then it closes the door (new connections are dropped), waits for the connections
already made to be accepted and to send their request, and hands over to granian's own stop
(SIGINT to itself), which finishes the requests in flight; ``flagstaff serve`` kills a
worker still busy after ``shutdown_timeout_seconds``.
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
"""Between the accept queue found empty and granian's stop: time for the connections just
accepted to send their request, so that none is idle when granian closes the idle ones."""
QUEUE_WAIT_SECONDS = 5.0
"""At most this long waiting for the accept queue to empty (a worker too busy to accept)."""
_POLL_SECONDS = 0.02
_SO_ATTACH_FILTER = 26
_TCP_INFO_SIZE = 104
_TCPI_UNACKED = 24
"""Where ``tcp_info`` holds, for a listening socket, its accept queue's length (u32)."""


def _bpf(code: int, jt: int, jf: int, k: int) -> int:
    """One classic BPF instruction as the kernel's ``struct sock_filter`` (u16, u8, u8, u32)."""
    return code | jt << 16 | jf << 24 | k << 32


_DROP_SYN = (ctypes.c_uint64 * 5)(
    _bpf(0x30, 0, 0, 13),  # ldb [13]: the TCP flags (a TCP socket's filter sees the TCP header)
    _bpf(0x54, 0, 0, 0x12),  # and #(SYN|ACK)
    _bpf(0x15, 0, 1, 0x02),  # jeq #SYN: a new connection's first packet...
    _bpf(0x06, 0, 0, 0),  # ret #0: ...is dropped
    _bpf(0x06, 0, 0, 0xFFFFFFFF),  # ret #-1: the rest (a handshake's last ACK) passes
)
"""Drop new connections' SYNs only: a handshake under way when the door closes completes and
is accepted (dropping its last ACK would leave the client believing it is connected, sending
a request that a reset answers when the listener closes)."""


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
        """Refuse new connections, accept the ones made and let them send their requests, then
        stop."""
        listeners = close_door(self.port)
        if not listeners:
            os.kill(os.getpid(), signal.SIGINT)
            return
        self._wait_accepted(loop, listeners, loop.time() + QUEUE_WAIT_SECONDS)

    def _wait_accepted(
        self, loop: asyncio.AbstractEventLoop, listeners: list[socket.socket], deadline: float
    ) -> None:
        if loop.time() < deadline and any(accept_queue(sock) for sock in listeners):
            loop.call_later(_POLL_SECONDS, self._wait_accepted, loop, listeners, deadline)
            return
        for sock in listeners:
            sock.close()
        loop.call_later(SETTLE_SECONDS, os.kill, os.getpid(), signal.SIGINT)

    async def check(self) -> str | None:
        """The readiness check: a stopping worker is not ready."""
        return "the server is shutting down" if self.active else None


DRAINING = Draining()


def close_door(port: int) -> list[socket.socket]:
    """Make this worker's listening sockets drop new connection attempts (a socket filter that
    drops SYNs: new clients' handshakes never complete, so they retry or see the port closed,
    and never send a request into a connection about to close), while the connections already
    made, in the accept queue too, are accepted and answered. granian offers no way to stop
    accepting without closing. Linux only. Returns the listeners filtered (duplicates, for
    :func:`accept_queue`; the caller closes them), none when it could not be done."""
    if sys.platform != "linux" or not port:
        return []
    program = struct.pack("HL", len(_DROP_SYN), ctypes.addressof(_DROP_SYN))
    filtered = []
    for sock in _listeners(port):
        try:
            sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, program)
        except OSError:
            sock.close()
            continue
        filtered.append(sock)
    return filtered


def accept_queue(sock: socket.socket) -> int:
    """Connections made but not yet accepted on the listening ``sock`` (0 when unknown)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    except OSError:
        return 0
    return int(struct.unpack_from("I", info, _TCPI_UNACKED)[0])


def _listeners(port: int) -> list[socket.socket]:
    """This process's listening TCP sockets on ``port`` (duplicates, to be closed)."""
    sockets: list[int] = []
    with contextlib.suppress(OSError):
        # Read every link before duplicating any: a duplicate may take the number of the
        # directory's own (closed) descriptor and be found again.
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                    sockets.append(int(name))
    found = []
    for fd in sockets:
        with contextlib.suppress(OSError):
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
