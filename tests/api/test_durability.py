"""Durable acknowledgement: kill -9 under load loses nothing that was answered 200."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import httpx

from tests.server import PROJECT_TOKEN, Api, Server


def test_kill_9_mid_load_keeps_every_acknowledged_event_exactly_once(tmp_path: Path) -> None:
    srv = Server(data_dir=tmp_path / "d", workers=2).start()
    acked: list[str] = []
    sent: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(n: int) -> None:
        with httpx.Client(base_url=srv.url, timeout=10) as http:
            while not stop.is_set():
                batch = [
                    {
                        "event": "load",
                        "distinct_id": f"user-{n}-{i % 7}",
                        "uuid": str(uuid.uuid4()),
                        "properties": {"$set": {"i": i}, "payload": "x" * 200},
                    }
                    for i in range(50)
                ]
                ids = [e["uuid"] for e in batch]
                with lock:
                    sent.extend(ids)
                try:
                    r = http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": batch})
                except httpx.HTTPError:
                    return
                if r.status_code == 200:
                    with lock:
                        acked.extend(ids)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    srv.kill()
    stop.set()
    for t in threads:
        t.join(15)
    assert len(acked) >= 3000, "the load did not get going"

    srv.start()
    try:
        api = Api(srv.url)
        stored: list[str] = []
        url: str | None = "/api/projects/@current/events/?limit=1000&event=load"
        for _ in range(1000):
            if url is None:
                break
            page = api.get(url).json()
            stored.extend(e["uuid"] for e in page["results"])
            url = page["next"]
        assert url is None, "pagination did not end"
        assert len(stored) == len(set(stored)), "an event was stored twice"
        missing = set(acked) - set(stored)
        assert not missing, f"{len(missing)} acknowledged events were lost"
        assert set(stored) <= set(sent)
        # replaying everything that was sent stores nothing twice
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            replay = [{"event": "load", "distinct_id": "replay", "uuid": u} for u in acked[:500]]
            assert (
                http.post("/batch/", json={"api_key": PROJECT_TOKEN, "batch": replay}).status_code
                == 200
            )
        count = api.get("/api/projects/@current/events/", params={"distinct_id": "replay"})
        assert count.json()["results"] == []
    finally:
        srv.stop()
