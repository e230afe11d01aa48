"""The web site that embeds posthog-js: its own port, so the SDK talks to Flagstaff cross-origin."""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

PAGES = Path(__file__).resolve().parent / "pages"


def journey_page(settings: dict[str, Any]) -> bytes:
    """pages/journey.html with its ``__SETTINGS__`` placeholder filled in."""
    template = (PAGES / "journey.html").read_text()
    return template.replace("__SETTINGS__", json.dumps(settings)).encode()


class _Handler(BaseHTTPRequestHandler):
    server: _SiteServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        found = self.server.files.get(urlsplit(self.path).path)
        if found is None:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        content_type, body = found
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _SiteServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        # Browsers ask for a favicon; a 404 would show up as a console error.
        self.files: dict[str, tuple[str, bytes]] = {"/favicon.ico": ("image/x-icon", b"")}


class Site:
    """Static files served from 127.0.0.1 on a free port, in a thread; use as a context manager."""

    def __init__(self) -> None:
        self._server = _SiteServer()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, path: str, body: bytes, content_type: str = "text/html; charset=utf-8") -> str:
        self._server.files[path] = (content_type, body)
        return self.url + path

    def __enter__(self) -> Site:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
