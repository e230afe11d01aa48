"""The floors under the HTTP targets: bare granian apps beside Flagstaff's ``/_health``.

Run: ``python -m bench.floor [--seconds 8] [--connections 64]``

Starts granian (2 workers, uvloop, as ``flagstaff serve`` runs) on the apps of
``bench.floor_apps``, once with the ASGI interface and once with RSGI, and Flagstaff itself on a
fresh data dir; wrk (one thread, same machine) measures each shape. Each line says what a
Python endpoint of that shape answers at best here, before any of its own work: a ``/flags``
answer cannot beat ``POST /post`` (11 KB answer), a single event handed to another process
cannot beat ``POST /roundtrip``. The last lines divide them by Flagstaff's ``/_health``, the
denominator of the issues' ratio targets.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from tests.server import free_port

from bench.load import WrkResult, lua_post, start_server, wrk

EVENT_BODY = (
    b'{"api_key":"phc_x","event":"$pageview","distinct_id":"user-1","properties":{'
    + b'"$current_url":"https://shop.example.com/p/1","title":"'
    + b"x" * 480
    + b'"}}'
)
FLAGS_BODY = b'{"api_key":"phc_x","distinct_id":"user-1","groups":{"company":"company-1"}}'


def _wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def _bare(
    interface: str, target: str, env: dict[str, str], folder: Path, args: argparse.Namespace
) -> list[WrkResult]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "granian",
            "--interface",
            interface,
            "--workers",
            "2",
            "--loop",
            "uvloop",
            "--port",
            str(port),
            "--no-ws",
            "--log-level",
            "warning",
            target,
        ],
        env=env,
    )
    try:
        _wait_http(url + "/get")
        post = lua_post("/post", [FLAGS_BODY], folder)
        trip = lua_post("/roundtrip", [EVENT_BODY], folder)
        run = {"seconds": args.seconds, "connections": args.connections}
        return [
            wrk(f"{interface} GET /get (15 B)", url + "/get", **run),
            wrk(f"{interface} POST /post (11 KB answer)", url + "/post", script=post, **run),
            wrk(f"{interface} POST /roundtrip (echo)", url + "/roundtrip", script=trip, **run),
        ]
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="flagstaff-floor-"))
    socket_path = str(folder / "echo.sock")
    echo = subprocess.Popen(
        [sys.executable, "-m", "bench.floor_apps", socket_path], stdout=subprocess.PIPE, text=True
    )
    try:
        assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
        env = {**os.environ, "FLOOR_ECHO_SOCKET": socket_path, "PYTHONPATH": os.getcwd()}
        results = _bare("asgi", "bench.floor_apps:asgi_app", env, folder, args)
        results += _bare("rsgi", "bench.floor_apps:rsgi_app", env, folder, args)
        srv, _ = start_server(2)
        try:
            health = wrk(
                "flagstaff GET /_health",
                srv.url + "/_health",
                seconds=args.seconds,
                connections=args.connections,
            )
        finally:
            srv.stop()
    finally:
        echo.terminate()
        echo.wait(10)

    print(f"granian, 2 workers, uvloop; wrk 1 thread, {args.connections} connections")
    for result in [*results, health]:
        print(result.line())
    by_label = {r.label: r.requests_per_s for r in results}
    for interface in ("asgi", "rsgi"):
        for label in ("POST /post (11 KB answer)", "POST /roundtrip (echo)"):
            rate = by_label[f"{interface} {label}"]
            print(
                f"{interface} {label:<26} / flagstaff /_health: {rate / health.requests_per_s:.2f}"
            )


if __name__ == "__main__":
    main()
