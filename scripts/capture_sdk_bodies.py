"""Record what the real PostHog SDKs send, as JSON fixtures in tests/fixtures/sdk/.

A recording HTTP server on a free 127.0.0.1 port answers like a PostHog host (capture routes,
/flags, /array/<token>/config(.js)) and keeps every request it gets. The real SDKs are driven
against it: posthog-python in this process, posthog-node and posthog-js (in headless Chromium)
through the node scripts in tests/e2e/tooling/. Each request becomes one file
`<sdk>-<scenario>-<n>.json` holding method, path, query, headers and the body as base64.

Usage: .venv/bin/python scripts/capture_sdk_bodies.py [--sdk python|node|js ...] [--out DIR]
Needs `scripts/install-e2e-deps.sh` to have run for the node and js SDKs.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
TOOLING_DIR = REPO_ROOT / "tests" / "e2e" / "tooling"
DEFAULT_OUT_DIR = REPO_ROOT / "tests" / "fixtures" / "sdk"
ARRAY_JS = TOOLING_DIR / "node_modules" / "posthog-js" / "dist" / "array.full.js"

TOKEN = "phc_flagstaff_fixture_token"
SDKS = ("python", "node", "js")
CAPTURE_PATHS = frozenset({"/e", "/i/v0/e", "/capture", "/batch", "/track", "/engage", "/s"})
CONFIG_PATH = re.compile(r"^/array/(?P<token>[^/]+)/config(?P<js>\.js)?$")
DRIVER_TIMEOUT_S = 90.0
METHOD_ORDER = {"GET": 0, "OPTIONS": 1, "POST": 2}


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    response_status: int

    def content_type(self) -> str:
        for name, value in self.headers.items():
            if name.lower() == "content-type":
                return value.split(";")[0].strip().lower()
        return ""

    def decoded(self) -> tuple[str, Any]:
        """(encoding, parsed JSON) of the body; encoding is empty, json, gzip or base64-form."""
        if not self.body:
            return "empty", None
        if self.body[:2] == b"\x1f\x8b":
            return "gzip", json.loads(gzip.decompress(self.body))
        if self.content_type() == "application/x-www-form-urlencoded":
            data = parse_qs(self.body.decode("ascii"))["data"][0]
            return "base64-form", json.loads(base64.b64decode(data))
        return "json", json.loads(self.body)

    def event_names(self) -> list[str] | None:
        """Names of the events the body carries, or None when it carries no events."""
        _, parsed = self.decoded()
        if isinstance(parsed, dict):
            items = parsed.get("batch", [parsed] if "event" in parsed else None)
        else:
            items = parsed
        if not isinstance(items, list):
            return None
        return [str(item.get("event")) for item in items if isinstance(item, dict)]

    def sort_key(self) -> tuple[int, str, str, tuple[str, ...]]:
        """Orders a scenario's requests independently of network timing."""
        events = tuple(self.event_names() or ())
        return METHOD_ORDER.get(self.method, 9), self.path, self.query, events

    def to_fixture(self, sdk: str, scenario: str, seq: int) -> dict[str, Any]:
        return {
            "sdk": sdk,
            "scenario": scenario,
            "seq": seq,
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": self.headers,
            "body_base64": base64.b64encode(self.body).decode("ascii"),
            "body_encoding": self.decoded()[0],
            "events": self.event_names(),
            "response_status": self.response_status,
        }


@dataclass
class RecorderState:
    """What the recorder has seen, and how it answers (set per scenario)."""

    supported_compression: list[str] = field(default_factory=lambda: ["gzip", "gzip-js"])
    requests: list[RecordedRequest] = field(default_factory=list)
    last_activity: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: RecordedRequest) -> None:
        with self.lock:
            self.requests.append(request)
            self.last_activity = time.monotonic()

    def take(self) -> list[RecordedRequest]:
        with self.lock:
            taken, self.requests = self.requests, []
            return taken

    def wait_quiet(self, quiet_s: float = 0.6, timeout_s: float = 15.0) -> None:
        """Wait until no request arrived for `quiet_s` seconds."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                idle = time.monotonic() - self.last_activity
            if idle >= quiet_s:
                return
            time.sleep(quiet_s - idle)


def remote_config(token: str, supported_compression: list[str]) -> dict[str, Any]:
    """A remote config like PostHog's, with every optional browser feature switched off."""
    return {
        "token": token,
        "supportedCompression": supported_compression,
        "hasFeatureFlags": True,
        "captureDeadClicks": False,
        "capturePerformance": False,
        "autocapture_opt_out": False,
        "autocaptureExceptions": False,
        "elementsChainAsString": True,
        "sessionRecording": False,
        "heatmaps": False,
        "surveys": False,
        "productTours": False,
        "defaultIdentifiedOnly": True,
        "siteApps": [],
    }


class RecorderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: RecorderState) -> None:
        super().__init__(("127.0.0.1", 0), RecorderHandler)
        self.state = state


class RecorderHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RecorderServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_OPTIONS(self) -> None:
        self._handle()

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        body = self._read_body()
        parts = urlsplit(self.path)
        status, content_type, payload = self._answer(parts.path, parts.query)
        self.server.state.add(
            RecordedRequest(
                method=self.command,
                path=parts.path,
                query=parts.query,
                headers=dict(self.headers.items()),
                body=body,
                response_status=status,
            )
        )
        self.send_response(status)
        origin = self.headers.get("Origin")
        if origin:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")
        if self.command == "OPTIONS":
            self.send_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
            requested = self.headers.get("Access-Control-Request-Headers")
            if requested:
                self.send_header("Access-Control-Allow-Headers", requested)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _answer(self, path: str, query: str) -> tuple[int, str, bytes]:
        json_type = "application/json"
        if self.command == "OPTIONS":
            return HTTPStatus.OK, "text/plain", b""
        config_match = CONFIG_PATH.match(path)
        if self.command == "GET" and config_match:
            token = config_match["token"]
            config = remote_config(token, self.server.state.supported_compression)
            if not config_match["js"]:
                return HTTPStatus.OK, json_type, json.dumps(config).encode()
            script = (
                "(function(){window._POSTHOG_REMOTE_CONFIG=window._POSTHOG_REMOTE_CONFIG||{};"
                f"window._POSTHOG_REMOTE_CONFIG[{json.dumps(token)}]="
                f"{json.dumps({'config': config, 'siteApps': []})};}})();"
            )
            return HTTPStatus.OK, "application/javascript", script.encode()
        route = path.rstrip("/") or "/"
        if route == "/flags" and self.command == "POST":
            answer: dict[str, Any] = {
                "flags": {},
                "errorsWhileComputingFlags": False,
                "requestId": str(uuid.uuid4()),
            }
            if "config=true" in query.split("&"):
                supported = self.server.state.supported_compression
                answer |= remote_config(TOKEN, supported) | {
                    "config": {"enable_collect_everything": True},
                    "toolbarParams": {},
                    "isAuthenticated": False,
                }
            return HTTPStatus.OK, json_type, json.dumps(answer).encode()
        if route in CAPTURE_PATHS:
            return HTTPStatus.OK, json_type, b'{"status": 1}'
        return HTTPStatus.NOT_FOUND, json_type, b'{"detail": "not found"}'


class SiteServer(ThreadingHTTPServer):
    """The web site embedding posthog-js: another origin than the recorder, like real sites."""

    daemon_threads = True

    def __init__(self, array_js: bytes) -> None:
        super().__init__(("127.0.0.1", 0), SiteHandler)
        self.array_js = array_js
        self.pages: dict[str, bytes] = {}


class SiteHandler(BaseHTTPRequestHandler):
    server: SiteServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/array.full.js":
            content_type, payload = "application/javascript", self.server.array_js
        elif path in self.server.pages:
            content_type, payload = "text/html; charset=utf-8", self.server.pages[path]
        else:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[str]:
    """Run `server` in a thread; yield its base URL."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{cast(str, host)}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# posthog-python scenarios: each gets the recorder URL and drives a fresh client.


def _python_client(host: str, **options: Any) -> Any:
    from posthog import Posthog

    return Posthog(TOKEN, host=host, max_retries=0, **options)


def _finish(client: Any) -> None:
    client.flush()
    client.shutdown()


def py_capture(host: str) -> None:
    client = _python_client(host)
    client.capture(
        "order completed",
        distinct_id="user-42",
        properties={"plan": "pro", "amount": 19.99, "items": 3},
        groups={"company": "acme"},
    )
    client.capture(
        "page viewed",
        distinct_id="anon-7",
        properties={"$process_person_profile": False, "path": "/pricing"},
    )
    _finish(client)


def py_set(host: str) -> None:
    client = _python_client(host)
    client.set(distinct_id="user-42", properties={"email": "ada@example.com", "plan": "pro"})
    client.set_once(distinct_id="user-42", properties={"first_seen": "2026-01-01"})
    _finish(client)


def py_identify(host: str) -> None:
    client = _python_client(host)
    client.capture(
        "$identify",
        distinct_id="user-42",
        properties={
            "$set": {"email": "ada@example.com", "plan": "pro"},
            "$set_once": {"first_seen": "2026-01-01"},
            "$anon_distinct_id": "anon-7",
        },
    )
    _finish(client)


def py_alias(host: str) -> None:
    client = _python_client(host)
    client.alias(previous_id="anon-7", distinct_id="user-42")
    _finish(client)


def py_group_identify(host: str) -> None:
    client = _python_client(host)
    client.group_identify(
        "company",
        "acme",
        {"name": "Acme Inc", "subscription": "enterprise", "founded": "2015-03-01T00:00:00Z"},
        distinct_id="user-42",
    )
    _finish(client)


def py_historical(host: str) -> None:
    client = _python_client(host, historical_migration=True)
    client.capture(
        "$identify",
        distinct_id="user-42",
        properties={"$set": {"email": "ada@example.com"}},
        timestamp="2024-05-01T09:00:00Z",
    )
    client.capture(
        "order completed",
        distinct_id="user-42",
        properties={"plan": "pro", "amount": 19.99},
        timestamp="2024-05-01T09:05:00Z",
    )
    _finish(client)


def py_flags(host: str) -> None:
    client = _python_client(host)
    flags = client.evaluate_flags(
        "user-42",
        groups={"company": "acme"},
        person_properties={"plan": "pro"},
        group_properties={"company": {"name": "Acme Inc"}},
    )
    flags.is_enabled("new-checkout")
    client.capture("checkout started", distinct_id="user-42", flags=flags)
    _finish(client)


def py_gzip(host: str) -> None:
    client = _python_client(host, gzip=True)
    client.capture("order completed", distinct_id="user-42", properties={"plan": "pro"})
    _finish(client)


PYTHON_SCENARIOS: dict[str, Callable[[str], None]] = {
    "capture": py_capture,
    "set": py_set,
    "identify": py_identify,
    "alias": py_alias,
    "group-identify": py_group_identify,
    "historical": py_historical,
    "flags": py_flags,
    "gzip": py_gzip,
}

NODE_SCENARIOS = ("capture", "identify", "alias", "group-identify", "flags")

# posthog-js scenarios: (init options beyond api_host and the user-agent filter, remote
# config's supportedCompression). posthog-js gzips unless told not to; a remote config that
# lists "base64" but not "gzip-js" switches it to the base64 form body.
BROWSER_SCENARIOS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "gzip": ({}, ["gzip", "gzip-js"]),
    "json": ({"disable_compression": True}, ["gzip", "gzip-js"]),
    "base64": ({}, ["base64"]),
}

PAGE_TEMPLATE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Flagstaff fixture page</title></head>
<body><h1>Flagstaff fixture page</h1>
<script src="/array.full.js"></script>
<script>
try {
  posthog.init(__TOKEN__, Object.assign({
    api_host: __API_HOST__,
    opt_out_useragent_filter: true,
    loaded: function (ph) {
      try {
        ph.capture('fixture clicked', {plan: 'pro', count: 3});
        ph.identify('user-42', {email: 'ada@example.com', plan: 'pro'}, {first_seen: '2026-01-01'});
        ph.group('company', 'acme', {name: 'Acme Inc', subscription: 'enterprise'});
        window.__fixtureDone = true;
      } catch (e) { window.__fixtureError = String(e); }
    }
  }, __OPTIONS__));
} catch (e) { window.__fixtureError = String(e); }
</script>
</body></html>
"""


def browser_page(api_host: str, options: dict[str, Any]) -> bytes:
    page = (
        PAGE_TEMPLATE.replace("__TOKEN__", json.dumps(TOKEN))
        .replace("__API_HOST__", json.dumps(api_host))
        .replace("__OPTIONS__", json.dumps(options))
    )
    return page.encode()


def run_node(script: str, *args: str) -> None:
    result = subprocess.run(
        ["node", script, *args],
        cwd=TOOLING_DIR,
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"node {script} {' '.join(args)} failed:\n{result.stderr}")


def write_fixtures(
    out_dir: Path, sdk: str, scenario: str, requests: Sequence[RecordedRequest]
) -> list[Path]:
    if not requests:
        raise RuntimeError(f"{sdk} {scenario}: the SDK sent no request")
    written = []
    for seq, request in enumerate(sorted(requests, key=RecordedRequest.sort_key), start=1):
        path = out_dir / f"{sdk}-{scenario}-{seq}.json"
        fixture = request.to_fixture(sdk, scenario, seq)
        path.write_text(json.dumps(fixture, indent=2, ensure_ascii=False) + "\n")
        written.append(path)
    return written


def capture_all(sdks: Sequence[str], out_dir: Path) -> list[Path]:
    if {"node", "js"} & set(sdks) and not ARRAY_JS.exists():
        raise RuntimeError(
            "tests/e2e/tooling/node_modules is missing: run scripts/install-e2e-deps.sh"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    state = RecorderState()
    written: list[Path] = []
    with serving(RecorderServer(state)) as api_host:

        def record(sdk: str, scenario: str, drive: Callable[[], None]) -> None:
            state.take()
            drive()
            state.wait_quiet()
            files = write_fixtures(out_dir, sdk, scenario, state.take())
            written.extend(files)
            print(f"{sdk}-{scenario}: {len(files)} request(s)", file=sys.stderr)

        for sdk in sdks:
            for stale in out_dir.glob(f"{sdk}-*.json"):
                stale.unlink()
            if sdk == "python":
                for name, scenario in PYTHON_SCENARIOS.items():
                    record(sdk, name, lambda scenario=scenario: scenario(api_host))
            elif sdk == "node":
                for name in NODE_SCENARIOS:
                    record(
                        sdk,
                        name,
                        lambda name=name: run_node("drive_node_sdk.mjs", api_host, TOKEN, name),
                    )
            elif sdk == "js":
                site = SiteServer(ARRAY_JS.read_bytes())
                with serving(site) as site_url:
                    for name, (options, compression) in BROWSER_SCENARIOS.items():
                        site.pages[f"/{name}.html"] = browser_page(api_host, options)
                        state.supported_compression = compression
                        record(
                            sdk,
                            name,
                            lambda name=name: run_node(
                                "drive_browser_sdk.mjs", f"{site_url}/{name}.html"
                            ),
                        )
                state.supported_compression = ["gzip", "gzip-js"]
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sdk", action="append", choices=SDKS, help="repeatable; default: all")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT_DIR)
    args = parser.parse_args(argv)
    try:
        written = capture_all(args.sdk or list(SDKS), args.out)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"capture_sdk_bodies: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} fixtures to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
