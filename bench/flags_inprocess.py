"""``/flags`` requests in-process through the app, for instruction counts on a shared machine.

Wall-clock throughput swings by 2x when other work shares the two cores; instruction counts do
not. Fill a data dir once (50 flags, 10,000 persons, as ``bench.flags_load``), then count:

    python -m bench.flags_inprocess fill /tmp/flags-data
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python -m bench.flags_inprocess run /tmp/flags-data 50
    (the same with 250)

The difference between the two totals divided by 200 is the instructions of one request (start-up
and compile cancel out); ``bytes`` must match between trees compared (same answers). To compare
two trees, run the same commands with ``PYTHONPATH=<other tree>/src``.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
from tests.server import PROJECT_TOKEN, Api, Server

from bench.engine import build_definitions, build_people
from bench.flags_load import _load_definitions, _load_people


def fill(data_dir: Path) -> None:
    rng = random.Random(7)
    srv = Server(data_dir=data_dir, workers=1).start(timeout=60)
    try:
        _load_definitions(Api(srv.url), rng)
        _load_people(srv.url, build_people(rng, 10_000))
        time.sleep(1)
    finally:
        srv.stop()


async def _lifespan(app: Any, kind: str) -> asyncio.Future[Any]:
    inbox = [{"type": f"lifespan.{kind}"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if inbox:
            return inbox.pop()
        await asyncio.sleep(3600)
        return {}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    task = asyncio.ensure_future(app({"type": "lifespan"}, receive, send))
    while not sent:
        await asyncio.sleep(0.01)
    return task


async def run(data_dir: Path, count: int) -> int:
    os.environ["FLAGSTAFF_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("FLAGSTAFF_LOG_LEVEL", "warning")
    from flagstaff.app import create_app

    rng = random.Random(7)
    build_definitions(rng)  # the same random sequence as fill()
    people = build_people(rng, 10_000)[:count]
    bodies = [
        msgspec.json.encode({"api_key": PROJECT_TOKEN, "distinct_id": d, "groups": g})
        for d, _, g in people
    ]
    app = create_app()
    lifespan = await _lifespan(app, "startup")
    answered = 0
    for body in bodies:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/flags/",
            "query_string": b"v=2",
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
            "client": ("127.0.0.1", 5000),
        }
        inbox = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive(inbox: list[dict[str, Any]] = inbox) -> dict[str, Any]:
            return inbox.pop()

        async def send(message: dict[str, Any]) -> None:
            nonlocal answered
            if message["type"] == "http.response.body":
                answered += len(message["body"])

        await app(scope, receive, send)
    lifespan.cancel()
    return answered


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "fill":
        fill(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "run":
        print("bytes", asyncio.run(run(Path(sys.argv[2]), int(sys.argv[3]))))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
