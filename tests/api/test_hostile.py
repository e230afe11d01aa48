"""Attacks an anonymous client can make (issue 18), each against a real server on loopback.

Every test bounds what it opens and closes it; none waits longer than the limits it checks.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Api, Server

P = "/api/projects/@current"
FLAGS_BODY = {"api_key": PROJECT_TOKEN, "distinct_id": "real-client"}


def _open(port: int, head: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head)
    return sock


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Server]:
    """A server with small limits, so the attacks need few sockets."""
    env = {
        "FLAGSTAFF_MAX_CONNECTIONS": "64",
        "FLAGSTAFF_MAX_UPLOADS": "32",
        "FLAGSTAFF_HEADER_TIMEOUT_MS": "1000",
        "FLAGSTAFF_BODY_TIMEOUT_SECONDS": "3",
        "FLAGSTAFF_MEMORY_BUDGET_MB": "16",
    }
    srv = Server(data_dir=tmp_path / "data", env=env).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_idle_bodies_do_not_lock_out_real_clients(fresh_server: Server) -> None:
    """2,100 connections send headers and one byte of body, then wait (default settings)."""
    head = (
        b"POST /batch/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{"
    )
    socks: list[socket.socket] = []
    try:
        for _ in range(2100):
            socks.append(_open(fresh_server.port, head))
        time.sleep(0.5)
        with httpx.Client(base_url=fresh_server.url, timeout=20) as client:
            for _ in range(3):
                assert client.post("/flags?v=2", json=FLAGS_BODY).status_code == 200
        # The oldest idle uploads were shed with a JSON 408.
        socks[0].settimeout(20)
        answer = socks[0].recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
        assert b'"code":"body_timeout"' in answer
    finally:
        for sock in socks:
            sock.close()


def test_stalled_body_times_out(limited: Server) -> None:
    sock = _open(
        limited.port,
        b"POST /batch/ HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
    )
    with sock:
        sock.settimeout(10)
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]


def test_dripped_headers_are_cut_off(limited: Server) -> None:
    """Headers that never finish: the connection is closed after the header timeout."""
    socks = [_open(limited.port, b"POST /batch/ HTTP/1.1\r\nHost: x\r\n") for _ in range(80)]
    try:
        socks[0].settimeout(10)
        assert socks[0].recv(4096) == b""
        with httpx.Client(base_url=limited.url, timeout=10) as client:
            assert client.post("/flags?v=2", json=FLAGS_BODY).status_code == 200
    finally:
        for sock in socks:
            sock.close()


def test_silent_connections_are_cut_off(limited: Server) -> None:
    """Connections that send nothing at all get the header timeout too (granian's protocol
    sniffing, on by default, waited for their first bytes for ever)."""
    socks = [_open(limited.port, b"") for _ in range(80)]
    try:
        socks[0].settimeout(10)
        assert socks[0].recv(4096) == b""
        with httpx.Client(base_url=limited.url, timeout=10) as client:
            assert client.post("/flags?v=2", json=FLAGS_BODY).status_code == 200
    finally:
        for sock in socks:
            sock.close()


def test_dripped_headers_leave_room_for_real_clients(tmp_path: Path) -> None:
    """2,100 connections hold unfinished headers (a 60 s header timeout, so none is cut off
    during the test): the connection bound is far above them and a new visitor is answered."""
    srv = Server(data_dir=tmp_path / "data", env={"FLAGSTAFF_HEADER_TIMEOUT_MS": "60000"})
    srv.start()
    socks: list[socket.socket] = []
    try:
        for _ in range(2100):
            socks.append(_open(srv.port, b"POST /batch/ HTTP/1.1\r\nHost: x\r\n"))
        with httpx.Client(base_url=srv.url, timeout=20) as client:
            for _ in range(3):
                assert client.post("/flags?v=2", json=FLAGS_BODY).status_code == 200
    finally:
        for sock in socks:
            sock.close()
        srv.stop()


def test_one_deeply_nested_event_is_dropped_alone(http: httpx.Client, api: Api) -> None:
    marker = uuid.uuid4().hex[:12]
    good = [{"event": "good", "distinct_id": marker, "properties": {"i": i}} for i in range(50)]
    deep = '{"a":' * 1000 + "1" + "}" * 1000
    deep_event = f'{{"event":"deep","distinct_id":"{marker}","properties":{{"d":{deep}}}}}'
    batch = ",".join([*map(json.dumps, good[:25]), deep_event, *map(json.dumps, good[25:])])
    body = f'{{"api_key":"{PROJECT_TOKEN}","batch":[{batch}]}}'
    r = http.post("/batch/", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    events = api.get(f"{P}/events/", params={"distinct_id": marker, "limit": 100}).json()
    assert sorted(e["properties"]["i"] for e in events["results"]) == list(range(50))
    warnings = api.get(f"{P}/ingestion_warnings/", params={"limit": 20}).json()["results"]
    assert any("nested" in json.dumps(w["details"]) for w in warnings)


def test_large_bodies_beyond_the_memory_budget_get_503_with_retry_after(limited: Server) -> None:
    """One 2 MB upload in progress holds 12 MB of the 16 MB budget; a second is refused."""
    size = 2 * 1024 * 1024
    first = _open(
        limited.port,
        b"POST /batch/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {size}\r\n\r\n".encode()
        + b" " * 1024,
    )
    try:
        time.sleep(0.3)
        body = json.dumps({"api_key": PROJECT_TOKEN, "batch": [], "pad": "x" * size}).encode()
        with httpx.Client(base_url=limited.url, timeout=10) as client:
            r = client.post("/batch/", content=body)
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "2"
            # answered before its body was read: the connection is not reused
            assert r.headers["connection"] == "close"
            assert r.json()["code"] == "server_busy"
            assert client.post("/flags?v=2", json=FLAGS_BODY).status_code == 200
    finally:
        first.close()
    time.sleep(0.3)
    with httpx.Client(base_url=limited.url, timeout=10) as client:
        assert client.post("/batch/", content=body).status_code == 200


def _worker_rss_mb(server: Server) -> float:
    """Resident memory of the server's (one) HTTP worker process."""
    assert server.proc is not None
    root = server.proc.pid
    children = Path(f"/proc/{root}/task/{root}/children").read_text().split()
    for pid in children:
        if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes():
            pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
            return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    raise AssertionError(f"no worker among {children}")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator")
def test_memory_goes_back_after_a_burst_of_large_bodies(fresh_server: Server) -> None:
    """Three rounds of two concurrent 19 MB batches: the worker's memory returns to where it
    started (it stayed about 55 MB higher while glibc's mmap threshold could move)."""
    event = {"event": "big", "distinct_id": "big", "properties": {"blob": "x" * 1_050_000}}
    body = json.dumps({"api_key": PROJECT_TOKEN, "batch": [event] * 18}).encode()
    with httpx.Client(base_url=fresh_server.url, timeout=60) as client:
        assert client.post("/flags?v=2", json=FLAGS_BODY).status_code == 200
        start = _worker_rss_mb(fresh_server)

        def send(_: int) -> int:
            return client.post("/batch/", content=body).status_code

        with ThreadPoolExecutor(2) as pool:
            for _round in range(3):
                assert set(pool.map(send, range(2))) == {200}
    grown = _worker_rss_mb(fresh_server) - start
    for _ in range(30):  # whatever is still being freed (granian's allocator decays in 10 s)
        if grown < 20:
            break
        time.sleep(0.5)
        grown = _worker_rss_mb(fresh_server) - start
    assert grown < 20, f"the worker kept {grown:.0f} MB after the burst"


def test_management_api_limits(http: httpx.Client) -> None:
    auth = {"Authorization": f"Bearer {PERSONAL_KEY}"}
    deep = http.post(f"{P}/feature_flags/", content=b"[" * 100_000, headers=auth)
    assert deep.status_code == 400 and deep.json()["code"] == "parse_error"
    big = http.post(f"{P}/cohorts/", content=b" " * (3 * 1024 * 1024), headers=auth)
    assert big.status_code == 413 and big.json()["code"] == "payload_too_large"
    for flag_id in ("99999999999999999999999", "abc", "-1", "0"):
        r = http.get(f"{P}/feature_flags/{flag_id}/", headers=auth)
        assert r.status_code == 404 and r.json()["code"] == "not_found", (flag_id, r.text)
    r = http.get(f"{P}/feature_flags/", params={"offset": "9" * 30}, headers=auth)
    assert r.status_code == 400 and r.json()["attr"] == "offset"


def test_put_replaces_a_flag(api: Api) -> None:
    key = f"put-{uuid.uuid4().hex[:8]}"
    flag = api.create_flag(key=key, name="before", active=True, ensure_experience_continuity=True)
    r = api.get(f"{P}/feature_flags/{flag['id']}/")
    body = {"key": key, "filters": {"groups": [{"properties": [], "rollout_percentage": 50}]}}
    put = api.client.put(f"{P}/feature_flags/{flag['id']}/", json=body)
    assert put.status_code == 200, put.text
    replaced = put.json()
    assert replaced["id"] == flag["id"]
    assert replaced["name"] == ""  # left out: back to the default, unlike PATCH
    assert replaced["ensure_experience_continuity"] is False
    assert replaced["filters"]["groups"][0]["rollout_percentage"] == 50
    assert replaced["version"] == r.json()["version"] + 1
    missing = api.client.put(f"{P}/feature_flags/{flag['id']}/", json={"name": "no key"})
    assert missing.status_code == 400 and missing.json()["attr"] == "key"


def test_data_files_are_private(server: Server, http: httpx.Client) -> None:
    http.post("/i/v0/e/", json={"api_key": PROJECT_TOKEN, "event": "e", "distinct_id": "p"})
    if os.environ.get("FLAGSTAFF_TEST_BACKEND", "sqlite") != "sqlite":
        pytest.skip("the SQLite files exist only on the SQLite backend")
    assert stat.S_IMODE(server.data_dir.stat().st_mode) == 0o700
    files = [p for p in server.data_dir.iterdir() if p.is_file()]
    assert files
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_error_bodies_carry_no_internals(http: httpx.Client) -> None:
    for body in (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage!", b'{"a": 1,,}'):
        r = http.post("/batch/", content=body)
        assert r.status_code == 400
        detail = r.json()["detail"]
        assert "Error -3" not in detail and "column" not in detail, detail
    r = http.post("/batch/", content=b"abcde", headers={"Content-Type": "application/json"})
    assert r.json()["code"] == "invalid_json"
