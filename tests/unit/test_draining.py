"""The door a stopping worker closes: new connections are dropped, the ones made are kept."""

from __future__ import annotations

import socket
import sys

import pytest

from flagstaff.server.draining import accept_queue, close_door

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="socket filters are Linux's")


def test_a_closed_door_drops_new_connections_and_keeps_the_queued_ones() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        queued = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(3)]
        assert accept_queue(listener) == 3
        filtered = close_door(port)
        try:
            assert len(filtered) == 1
            late = socket.socket()
            late.settimeout(0.5)
            with pytest.raises(TimeoutError), late:
                late.connect(("127.0.0.1", port))
            assert accept_queue(filtered[0]) == 3
            # The queued connections are still accepted and carry their requests.
            for client in queued:
                client.sendall(b"ping")
                conn, _ = listener.accept()
                with conn:
                    assert conn.recv(4) == b"ping"
                    conn.sendall(b"pong")
                assert client.recv(4) == b"pong"
            assert accept_queue(filtered[0]) == 0
        finally:
            for sock in filtered + queued:
                sock.close()


def test_no_listener_on_the_port_closes_nothing() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening
        assert close_door(port) == []
