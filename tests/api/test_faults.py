"""Faults injected under load: what clients see, and that nothing acknowledged is lost.

- the SQLite ingest writer killed alone (kill -9): /_ready says so, /batch/ answers 503 until
  the supervisor has restarted it, then 200 again by itself;
- PostgreSQL restarted (``pg_ctl restart -m fast``) and crashed (kill -9 of the postmaster,
  then started) on a private cluster: 503 with Retry-After, never 500, logged once per outage;
- SIGTERM: every request sent gets an answer;
- answers given before the body was read reach clients that send their whole body first.

Each test bounds its own wall time (a few seconds of load around each fault).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests

from tests import pg
from tests.faults import Load, assert_nothing_acknowledged_lost
from tests.server import PROJECT_TOKEN, Server, storage_backend

MB = 1024 * 1024


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _ingest_writer(server_pid: int) -> int:
    for pid in _children(server_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"flagstaff.store.sqlite.ingestd" in cmdline:
            return pid
    raise AssertionError("no ingest writer process")


def _ready(base: str) -> tuple[int, Any]:
    r = httpx.get(base + "/_ready", timeout=5)
    return r.status_code, r.json()


@pytest.mark.skipif(storage_backend() != "sqlite", reason="the ingest writer is SQLite's")
def test_a_killed_ingest_writer_is_restarted_and_nothing_acknowledged_is_lost(
    tmp_path: Path,
) -> None:
    srv = Server(data_dir=tmp_path / "data", workers=2).start()
    try:
        assert srv.proc is not None
        with Load(srv.port) as load:
            load.wait_acked(400)
            writer = _ingest_writer(srv.proc.pid)
            os.kill(writer, signal.SIGKILL)
            # /_ready names the reason while the writer is down ...
            seen: list[tuple[int, Any]] = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                seen.append(_ready(srv.url))
                if seen[-1][0] == 200 and any(status == 503 for status, _ in seen):
                    break
            not_ready = [body for status, body in seen if status == 503]
            assert not_ready, "/_ready never said the writer was down"
            assert {r["check"] for r in not_ready[0]["reasons"]} == {"ingest_writer"}
            # ... and is ready again once the supervisor restarted it: /batch/ recovers alone.
            assert seen[-1] == (200, {"status": "ok"}), seen[-1]
            load.wait_more(400, timeout=10)
        assert _ingest_writer(srv.proc.pid) != writer
        assert set(load.statuses) <= {200, 503}, load.statuses
        assert not load.lost_answers, load.lost_answers[:5]
        assert_nothing_acknowledged_lost(srv.url, load)
        assert srv.log_path is not None
        log = srv.log_path.read_text()
        assert "the ingest writer process exited (killed by signal 9)" in log
        assert log.count("storage unavailable: answering 503") <= 2  # once per worker
    finally:
        srv.stop()


@pytest.mark.skipif(storage_backend() != "postgres", reason="a PostgreSQL cluster's own faults")
def test_postgres_restart_and_crash_answer_503_and_lose_nothing(tmp_path: Path) -> None:
    with pg.private_cluster() as (cluster, url):
        srv = Server(
            data_dir=tmp_path / "data", workers=2, env={"FLAGSTAFF_DATABASE_URL": url}
        ).start()
        flags_statuses: list[int] = []
        stop_flags = threading.Event()

        def ask_flags() -> None:
            with httpx.Client(base_url=srv.url, timeout=10) as http:
                while not stop_flags.is_set():
                    r = http.post(
                        "/flags/?v=2", json={"api_key": PROJECT_TOKEN, "distinct_id": "x"}
                    )
                    flags_statuses.append(r.status_code)
                    time.sleep(0.01)

        flags_thread = threading.Thread(target=ask_flags)
        flags_thread.start()
        try:
            with Load(srv.port) as load:
                load.wait_acked(300)
                cluster.restart_fast()
                load.wait_more(300)
                cluster.crash()
                not_ready: list[Any] = []
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline and not not_ready:
                    status, body = _ready(srv.url)
                    if status == 503:
                        not_ready.append(body)
                    time.sleep(0.05)
                cluster.resume()
                load.wait_more(300)
            assert not_ready, "/_ready never said the database was down"
            assert "database" in {r["check"] for r in not_ready[0]["reasons"]}
            assert load.statuses[503] > 0, "the faults were not seen"
            assert set(load.statuses) <= {200, 503}, load.statuses
            assert not load.lost_answers, load.lost_answers[:5]
            stop_flags.set()
            flags_thread.join(15)
            assert set(flags_statuses) == {200}, set(flags_statuses)
            assert_nothing_acknowledged_lost(srv.url, load)
            # Logged once per outage and worker (two outages, two workers), not per request.
            assert srv.log_path is not None
            outages = srv.log_path.read_text().count("storage unavailable: answering 503")
            assert 1 <= outages <= 8, outages
        finally:
            stop_flags.set()
            flags_thread.join(15)
            srv.stop()


def test_sigterm_under_load_answers_every_request_sent(tmp_path: Path) -> None:
    srv = Server(
        data_dir=tmp_path / "data", workers=2, env={"FLAGSTAFF_SHUTDOWN_GRACE_SECONDS": "1"}
    ).start()
    base = srv.url
    with Load(srv.port, clients=8) as load:
        load.wait_acked(400)
        stopper = threading.Thread(target=srv.stop)
        stopper.start()
        # While it drains (1 s), a stopping server is no longer ready.
        draining: list[Any] = []
        deadline = time.monotonic() + 1
        while not draining and time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                status, body = _ready(base)
                if status == 503:
                    draining.append(body)
            time.sleep(0.02)
        stopper.join(40)
        assert not stopper.is_alive(), "the server did not stop"
        # The clients keep trying a moment after the server is gone.
        refused = load.refused
        deadline = time.monotonic() + 5
        while load.refused <= refused + 8 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not load.lost_answers, load.lost_answers[:5]
    assert set(load.statuses) <= {200}, load.statuses
    assert draining and draining[0]["reasons"] == [
        {"check": "shutdown", "detail": "the server is shutting down"}
    ], draining
    srv.start()
    try:
        assert_nothing_acknowledged_lost(srv.url, load)
    finally:
        srv.stop()


def _urllib_post(url: str, body: bytes) -> tuple[int, dict[str, Any], str | None]:
    """urllib sends the whole body before it reads the answer."""
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read()), None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers.get("Retry-After")


def _batch_of_size(size: int) -> bytes:
    head = b'{"api_key":"%s","batch":[{"event":"big","distinct_id":"d","properties":{"p":"' % (
        PROJECT_TOKEN.encode()
    )
    tail = b'"}}]}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


def test_early_refusals_reach_clients_that_send_their_whole_body_first(tmp_path: Path) -> None:
    srv = Server(data_dir=tmp_path / "data", workers=1).start()
    try:
        too_large = _batch_of_size(21 * MB)
        status, body, _ = _urllib_post(srv.url + "/batch/", too_large)
        assert (status, body["code"]) == (413, "payload_too_large")
        r = requests.post(srv.url + "/batch/", data=too_large, timeout=60)
        assert (r.status_code, r.json()["code"]) == (413, "payload_too_large")
        # the management API (body read by the app before starlette) and a long URL too
        status, body, _ = _urllib_post(srv.url + "/api/projects/@current/feature_flags/", too_large)
        assert status in (401, 413), body
        status, body, _ = _urllib_post(srv.url + "/batch/?" + "x" * 9000, b"{}" * 100_000)
        assert (status, body["code"]) == (414, "uri_too_long")

        # 16 batches of 19 MB at once: past one worker's memory budget the rest get 503.
        big = _batch_of_size(19 * MB)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda _: _urllib_post(srv.url + "/batch/", big), range(16)))
        statuses = sorted(status for status, _, _ in answers)
        assert set(statuses) <= {200, 503}, statuses
        assert 200 in statuses and 503 in statuses, statuses
        for status, body, retry_after in answers:
            if status == 503:
                assert body["code"] == "server_busy" and retry_after == "2"
    finally:
        srv.stop()
