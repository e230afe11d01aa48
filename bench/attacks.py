"""The issue 18 attacks against a live server, and what a real client saw meanwhile.

    python -m bench.attacks [--workers N] [--connections N] [--hold SECONDS] [--only NAME]

Starts a server (SQLite, fresh data dir, default limits), then runs each attack in turn while a
"real client" thread sends ``POST /flags`` and a one-event ``POST /batch/`` on a new connection
every 50 ms. Per
attack it prints the client's latencies (p50, p99, max) and errors, and the server's peak and
settled memory (RSS of the server, its workers and the ingest writer, sampled every 100 ms;
"settled" is three seconds after the attack ends). At the end every event the client had
acknowledged (200) is looked up through the management API: the count must match.
Loopback only; every socket it opens is closed when its attack ends.
"""

from __future__ import annotations

import argparse
import gzip
import json
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tests.server import PROJECT_TOKEN, Api, Server

PAGE = 4096


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found.extend(int(p) for p in task.read_text().split())
    return found


def tree_rss_mb(root: int) -> float:
    """Resident memory of a process and all its descendants, in MB."""
    total = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
            stack.extend(_children(pid))
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    return total / 1e6


@dataclass
class Observed:
    flags_ms: list[float] = field(default_factory=list)
    batch_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    peak_mb: float = 0.0


class RealClient(threading.Thread):
    """A well-behaved SDK: flags and one-event batches on a new connection every 50 ms, with a
    10 s timeout."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.window = Observed()
        self.acknowledged: list[str] = []
        self.stop_event = threading.Event()
        self.distinct_id = f"real-{uuid.uuid4().hex[:8]}"

    def run(self) -> None:
        while not self.stop_event.is_set():
            # A new connection each time, as a new visitor's browser would open.
            with httpx.Client(base_url=self.url, timeout=10.0) as client:
                self._once(client)
            time.sleep(0.05)

    def _once(self, client: httpx.Client) -> None:
        window = self.window
        flags = {"api_key": PROJECT_TOKEN, "distinct_id": self.distinct_id}
        event_uuid = str(uuid.uuid4())
        batch = {
            "api_key": PROJECT_TOKEN,
            "batch": [{"event": "real", "distinct_id": self.distinct_id, "uuid": event_uuid}],
        }
        for path, body, sink in (("/flags?v=2", flags, window.flags_ms), ("/batch/", batch, None)):
            started = time.perf_counter()
            try:
                r = client.post(path, json=body)
            except httpx.HTTPError as exc:
                window.errors.append(f"{path}: {type(exc).__name__}")
                continue
            elapsed = (time.perf_counter() - started) * 1000
            if r.status_code != 200:
                window.errors.append(f"{path}: {r.status_code}")
                continue
            (window.flags_ms if sink is not None else window.batch_ms).append(elapsed)
            if sink is None:
                self.acknowledged.append(event_uuid)


def _sample_memory(pid: int, window: Observed, stop: threading.Event) -> None:
    while not stop.is_set():
        window.peak_mb = max(window.peak_mb, tree_rss_mb(pid))
        time.sleep(0.1)


def _hold_sockets(port: int, count: int, head: bytes, hold: float) -> str:
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(head)
                socks.append(sock)
            except OSError:
                break
        time.sleep(hold)
    finally:
        for sock in socks:
            sock.close()
    return f"{len(socks)} connections held {hold:.0f} s"


def idle_bodies(url: str, port: int, args: argparse.Namespace) -> str:
    head = (
        b"POST /batch/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{"
    )
    return _hold_sockets(port, args.connections, head, args.hold)


def dripped_headers(url: str, port: int, args: argparse.Namespace) -> str:
    return _hold_sockets(port, args.connections, b"POST /batch/ HTTP/1.1\r\nHost: x\r\n", args.hold)


def silent_connections(url: str, port: int, args: argparse.Namespace) -> str:
    """Connections that send nothing at all (not even the first byte of a request line)."""
    return _hold_sockets(port, args.connections, b"", args.hold)


def gzip_members(url: str, port: int, args: argparse.Namespace) -> str:
    body = gzip.compress(b"", mtime=0) * 100_000
    statuses = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(4):
            r = client.post("/batch/", content=body, headers={"Content-Encoding": "gzip"})
            statuses.append(r.status_code)
    return f"4 x 2 MB of 100,000 empty members: {sorted(set(statuses))}"


def nested_event(url: str, port: int, args: argparse.Namespace) -> str:
    deep = '{"a":' * 1000 + "1" + "}" * 1000
    marker = f"nested-{uuid.uuid4().hex[:8]}"
    good = [json.dumps({"event": "good", "distinct_id": marker}) for _ in range(50)]
    body = f'{{"api_key":"{PROJECT_TOKEN}","batch":[{",".join(good[:25])},'
    body += f'{{"event":"deep","distinct_id":"{marker}","properties":{{"d":{deep}}}}},'
    body += f"{','.join(good[25:])}]}}"
    statuses = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(20):
            statuses.append(client.post("/batch/", content=body).status_code)
    stored = Api(url).get(
        "/api/projects/@current/events/", params={"distinct_id": marker, "limit": 1000}
    )
    count = len(stored.json()["results"])
    return f"20 batches of 50 good + 1 deep: {sorted(set(statuses))}, {count}/1000 good stored"


def large_bodies(url: str, port: int, args: argparse.Namespace) -> str:
    """Eight concurrent 19 MB batches of over-large events (dropped), four rounds."""
    event = {"event": "big", "distinct_id": "big", "properties": {"blob": "x" * 1_050_000}}
    body = json.dumps({"api_key": PROJECT_TOKEN, "batch": [event] * 18}).encode()
    statuses: dict[int, int] = {}

    def send(_: int) -> int:
        with httpx.Client(base_url=url, timeout=120) as client:
            for _attempt in range(20):
                r = client.post("/batch/", content=body)
                if r.status_code != 503:
                    return r.status_code
                statuses[503] = statuses.get(503, 0) + 1
                time.sleep(float(r.headers.get("retry-after", "1")))
            return 503

    with ThreadPoolExecutor(8) as pool:
        for _ in range(4):
            for status in pool.map(send, range(8)):
                statuses[status] = statuses.get(status, 0) + 1
    return f"4 rounds of 8 x {len(body) / 1e6:.0f} MB: statuses {statuses}"


def query_cache(url: str, port: int, args: argparse.Namespace) -> str:
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(1100):
            client.post(f"/flags?v=2&pad={i}{'x' * 60_000}", json={"api_key": PROJECT_TOKEN})
    return "1,100 distinct 60 KB query strings on /flags"


ATTACKS: dict[str, Callable[[str, int, argparse.Namespace], str]] = {
    "idle_bodies": idle_bodies,
    "dripped_headers": dripped_headers,
    "silent_connections": silent_connections,
    "gzip_members": gzip_members,
    "nested_event": nested_event,
    "large_bodies": large_bodies,
    "query_cache": query_cache,
}


def _pct(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.0f}"


def _row(name: str, note: str, window: Observed, settled: float) -> str:
    flags, batch = window.flags_ms, window.batch_ms
    return (
        f"{name:<16} flags p50/p99/max {_pct(flags, 0.5):>4}/{_pct(flags, 0.99):>5}/"
        f"{max(flags, default=0):>6.0f} ms  batch {_pct(batch, 0.5):>4}/{_pct(batch, 0.99):>5}/"
        f"{max(batch, default=0):>6.0f} ms  errors {len(window.errors):>3}  "
        f"memory peak {window.peak_mb:5.0f} MB settled {settled:5.0f} MB\n    {note}"
        + (f"\n    errors: {sorted(set(window.errors))}" if window.errors else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--connections", type=int, default=2100)
    parser.add_argument("--hold", type=float, default=8.0)
    parser.add_argument("--only", choices=sorted(ATTACKS), action="append")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flagstaff-attacks-") as tmp:
        server = Server(data_dir=Path(tmp) / "data", workers=args.workers).start()
        assert server.proc is not None
        pid = server.proc.pid
        try:
            client = RealClient(server.url)
            client.start()
            time.sleep(1.0)
            print(f"baseline memory {tree_rss_mb(pid):.0f} MB ({args.workers} worker(s))")
            for name in args.only or list(ATTACKS):
                client.window = window = Observed()
                stop = threading.Event()
                sampler = threading.Thread(target=_sample_memory, args=(pid, window, stop))
                sampler.start()
                note = ATTACKS[name](server.url, server.port, args)
                time.sleep(3.0)
                stop.set()
                sampler.join()
                print(_row(name, note, window, tree_rss_mb(pid)), flush=True)
            client.stop_event.set()
            client.join()
            _check_acknowledged(server.url, client)
        finally:
            server.stop()


def _check_acknowledged(url: str, client: RealClient) -> None:
    api = Api(url)
    stored: set[str] = set()
    next_url: str | None = "/api/projects/@current/events/"
    params: dict[str, str | int] | None = {"distinct_id": client.distinct_id, "limit": 1000}
    while next_url:
        page = api.get(next_url, params=params).json()
        stored.update(e["uuid"] for e in page["results"])
        next_url, params = page.get("next"), None
    lost = set(client.acknowledged) - stored
    print(f"acknowledged events {len(client.acknowledged)}, stored {len(stored)}, lost {len(lost)}")
    if lost:
        raise SystemExit(f"bench: {len(lost)} acknowledged events are missing")


if __name__ == "__main__":
    main()
