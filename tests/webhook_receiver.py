"""A webhook receiver for tests: an HTTP server in the test's process that records what it is
sent and answers each path with the statuses planned for it."""

from __future__ import annotations

import hmac
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec

from flagstaff.activity.webhooks import SIGNATURE_VERSION, sign

DEFAULT_TOLERANCE_S = 300


def verify_signature(
    secret: str, header: str, body: bytes, now_s: int, tolerance_s: int = DEFAULT_TOLERANCE_S
) -> bool:
    """What a receiver checks: ``header`` (``t=<unix seconds>,v1=<hex>``) signs ``body`` with
    ``secret``, at most ``tolerance_s`` from ``now_s``."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        fields.setdefault(name, []).append(value)
    try:
        timestamp = int(fields.get("t", [""])[0])
    except ValueError:
        return False
    if abs(now_s - timestamp) > tolerance_s:
        return False
    expected = sign(secret, timestamp, body)
    return any(hmac.compare_digest(expected, v) for v in fields.get(SIGNATURE_VERSION, []))


class Received(msgspec.Struct):
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """An HTTP server answering each path with the statuses planned for it (then 200)."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.plans: dict[str, list[int]] = {}
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with owner.lock:
                    owner.received.append(Received(self.path, dict(self.headers), body))
                    plan = owner.plans.get(self.path) or []
                    status = plan.pop(0) if plan else 200
                self.send_response(status)
                self.send_header("content-length", "7")
                self.end_headers()
                self.wfile.write(b"nope :(" if status >= 300 else b"thanks!")

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}{path}"

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def wait(self, path: str, count: int, seconds: float = 20.0) -> list[Received]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            got = self.at(path)
            if len(got) >= count:
                return got
            time.sleep(0.05)
        raise AssertionError(f"{path}: {len(self.at(path))} deliveries, wanted {count}")

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
