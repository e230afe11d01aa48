"""Operations endpoints, bootstrap, graceful shutdown."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.server import Server, free_port


def test_health_ready_metrics(http: httpx.Client) -> None:
    assert http.get("/_health").json() == {"status": "ok"}
    assert http.get("/_ready").json() == {"status": "ok"}
    http.get("/_health")
    text = http.get("/metrics").text
    assert "# TYPE flagstaff_http_requests_total counter" in text
    assert re.search(r'flagstaff_http_requests_total\{route="/_health",status="200"\} \d+', text)
    assert 'flagstaff_http_request_duration_seconds_bucket{route="/_health",le="+Inf"}' in text
    assert "flagstaff_events_ingested_total" in text
    assert "flagstaff_flag_evaluations_total" in text


def test_unknown_route_is_json_404(http: httpx.Client) -> None:
    r = http.get("/nope")
    assert r.status_code == 404 and r.json()["code"] == "not_found"


def test_first_start_creates_and_prints_project_and_key_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    cmd = [sys.executable, "-m", "flagstaff", "serve", "--port", str(port), "--data-dir", str(data)]
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("FLAGSTAFF_")}

    def run_once() -> str:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = b""
        assert proc.stdout is not None
        import time

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        return out.decode()

    first = run_once()
    lines = [json.loads(line) for line in first.splitlines()]  # JSON from the first line
    created = next(line for line in lines if "personal_api_key" in line)
    assert "shown only now" in created["msg"]
    token, key = created["project_token"], created["personal_api_key"]
    assert token.startswith("phc_") and key.startswith("phx_")
    assert any(line["msg"].startswith("flagstaff ") and "url" in line for line in lines)
    # Nobody can log in to the console yet: the start says how to make its first admin.
    hint = next(line for line in lines if "command" in line)
    assert hint["console_url"] == f"http://127.0.0.1:{port}/"
    command = shlex.split(hint["command"])
    assert command[:2] == ["flagstaff", "user"] and command[-2:] == ["--data-dir", str(data)]
    made = subprocess.run(
        [sys.executable, "-m", "flagstaff", *command[1:]],
        input=b"a long enough password\n",
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    second = run_once()
    assert all(json.loads(line) for line in second.splitlines())
    assert "phx_" not in second and "phc_" not in second, second
    assert "user create" not in second  # an admin exists now

    srv = Server(
        data_dir=data,
        env={"FLAGSTAFF_INIT_PROJECT_TOKEN": "", "FLAGSTAFF_INIT_PERSONAL_API_KEY": ""},
    )
    srv.start()
    try:
        r = httpx.get(
            f"{srv.url}/api/projects/@current/",
            headers={"Authorization": f"Bearer {key}"},
        )
        assert r.status_code == 200 and r.json()["api_token"] == token
    finally:
        srv.stop()


def test_bootstrap_from_environment_is_idempotent(tmp_path: Path) -> None:
    srv = Server(data_dir=tmp_path / "data").start()
    srv.stop()
    srv.start()
    try:
        from tests.server import Api

        projects = Api(srv.url).get("/api/projects/").json()
        assert projects["count"] == 1
    finally:
        assert srv.stop() == 0


def test_sigterm_exits_cleanly(fresh_server: Server) -> None:
    assert fresh_server.stop(signal.SIGTERM) == 0


def test_access_log_is_opt_in(tmp_path: Path) -> None:
    quiet = Server(data_dir=tmp_path / "quiet").start()
    try:
        httpx.get(quiet.url + "/_health")
    finally:
        quiet.stop()
    assert '"flagstaff.access"' not in quiet.logs()

    srv = Server(data_dir=tmp_path / "loud", env={"FLAGSTAFF_ACCESS_LOG": "true"}).start()
    try:
        httpx.get(srv.url + "/_health", headers={"X-Request-Id": "req-42"})
        httpx.get(srv.url + "/api/projects/")
    finally:
        srv.stop()
    lines = [json.loads(line) for line in srv.logs().splitlines() if line.startswith("{")]
    access = [line for line in lines if line["logger"] == "flagstaff.access"]
    health = next(line for line in access if line["request_id"] == "req-42")
    assert health["method"] == "GET" and health["path"] == "/_health"
    assert health["status"] == 200 and health["ms"] >= 0
    api = next(line for line in access if line["path"] == "/api/projects/")
    assert api["status"] == 401 and len(api["request_id"]) == 16
