"""Load for the fault tests: clients that post batches and note what each answer was.

Every request ends in one of three ways: an HTTP status (counted), refused before anything
was sent (the server was not listening: the client retries later, nothing was lost), or an
error after the request was sent (reset, closed without an answer): the fault tests assert
there are none of the last kind. Events acknowledged by a 200 are kept to compare with the
store afterwards.
"""

from __future__ import annotations

import collections
import http.client
import json
import threading
import time
import uuid
from typing import Any

from tests.server import PROJECT_TOKEN, Api


class Load:
    """``clients`` threads posting ``batch``-event batches to ``/batch/`` until :meth:`stop`."""

    def __init__(self, port: int, clients: int = 4, batch: int = 20, event: str = "fault") -> None:
        self.port = port
        self.batch = batch
        self.event = event
        self.statuses: collections.Counter[int] = collections.Counter()
        self.refused = 0
        self.lost_answers: list[str] = []
        """Requests sent that got no answer (a reset, a connection closed without one)."""
        self.acked: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def wait_acked(self, count: int, timeout: float = 30.0) -> None:
        """Until at least ``count`` events were acknowledged in all."""
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} events acknowledged"
            assert not self._stop.is_set()
            time.sleep(0.02)

    def wait_more(self, count: int, timeout: float = 30.0) -> None:
        """Until ``count`` more events than now were acknowledged."""
        self.wait_acked(len(self.acked) + count, timeout)

    def _client(self) -> None:
        conn: http.client.HTTPConnection | None = None
        while not self._stop.is_set():
            ids = [str(uuid.uuid4()) for _ in range(self.batch)]
            body = json.dumps(
                {
                    "api_key": PROJECT_TOKEN,
                    "batch": [
                        {"event": self.event, "distinct_id": f"d-{i % 5}", "uuid": u}
                        for i, u in enumerate(ids)
                    ],
                }
            ).encode()
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                try:
                    conn.connect()
                except (ConnectionRefusedError, TimeoutError):
                    conn = None
                    with self._lock:
                        self.refused += 1
                    time.sleep(0.02)
                    continue
            try:
                conn.request("POST", "/batch/", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException) as exc:
                with self._lock:
                    self.lost_answers.append(repr(exc))
                conn.close()
                conn = None
                continue
            with self._lock:
                self.statuses[response.status] += 1
                if response.status == 200:
                    self.acked.extend(ids)
            if response.will_close:
                conn.close()
                conn = None
            if response.status != 200:
                time.sleep(0.02)
        if conn is not None:
            conn.close()


def stored_uuids(base_url: str, event: str = "fault") -> list[str]:
    """Every stored event named ``event``, through the management API's events listing."""
    api = Api(base_url)
    stored: list[str] = []
    url: str | None = f"/api/projects/@current/events/?limit=1000&event={event}"
    for _ in range(10_000):
        if url is None:
            return stored
        page: Any = api.get(url).json()
        stored.extend(e["uuid"] for e in page["results"])
        url = page["next"]
    raise AssertionError("the events listing did not end")


def assert_nothing_acknowledged_lost(base_url: str, load: Load) -> None:
    stored = stored_uuids(base_url, load.event)
    assert len(stored) == len(set(stored)), "an event was stored twice"
    missing = set(load.acked) - set(stored)
    assert not missing, f"{len(missing)} of {len(load.acked)} acknowledged events were lost"
