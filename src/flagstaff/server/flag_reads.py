"""Flag reads recorded as ``$feature_flag_called``: how an OFREP evaluation of one flag counts
for flag usage and experiment exposures.

The PostHog SDKs send ``$feature_flag_called`` when the application reads a flag, once per
(distinct id, flag, value) in the life of the SDK's client; ``/flags`` itself records nothing.
The OFREP providers send no event, so for them the server records the read of one flag
(``POST /ofrep/v1/evaluate/flags/{key}``, which server providers call on every read) the same
way: once per (project, distinct id, flag, value) per worker process, remembering at most
:data:`MAX_REMEMBERED` reads (then forgetting them all, as posthog-python does). The event goes
through the ordinary ingestion (normalising, then ``store.ingest``), so persons, flag usage and
exposures follow their usual rules. A bulk evaluation records nothing, as ``/flags`` does not:
it is a prefetch, not a read.
"""

from __future__ import annotations

from typing import Any

from flagstaff.common import clock
from flagstaff.ingest.event_names import FEATURE_FLAG_CALLED, FLAG_PROPERTY, FLAG_RESPONSE_PROPERTY
from flagstaff.ingest.model import Envelope, Event
from flagstaff.ingest.normalize import normalize_event
from flagstaff.ops import logs
from flagstaff.store.base import Project, Store

MAX_REMEMBERED = 50_000
LIB = "flagstaff-ofrep"
"""The ``$lib`` of the recorded events: they say they came from an OFREP evaluation."""


def flag_called_event(distinct_id: str, key: str, response: bool | str) -> dict[str, Any]:
    """The raw ``$feature_flag_called`` event a PostHog SDK sends for this read."""
    return {
        "event": FEATURE_FLAG_CALLED,
        "distinct_id": distinct_id,
        "properties": {
            FLAG_PROPERTY: key,
            FLAG_RESPONSE_PROPERTY: response,
            f"$feature/{key}": response,
            "locally_evaluated": False,
            "$lib": LIB,
        },
    }


class FlagReads:
    """One worker's reads recorded so far, and the recording."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._seen: set[tuple[int, str, str, bool | str]] = set()

    def first(self, project_id: int, distinct_id: str, key: str, response: bool | str) -> bool:
        """Whether this read is new to this worker (and remember it)."""
        read = (project_id, distinct_id, key, response)
        if read in self._seen:
            return False
        if len(self._seen) >= MAX_REMEMBERED:
            self._seen.clear()
        self._seen.add(read)
        return True

    async def record(
        self, project: Project, distinct_id: str, key: str, response: bool | str
    ) -> int:
        """Record the read unless this worker has already; the number of events stored. A
        store failure is logged and forgotten (the read is tried again next time): the
        evaluation's answer does not depend on it."""
        if not self.first(project.id, distinct_id, key, response):
            return 0
        raw = flag_called_event(distinct_id, key, response)
        envelope = Envelope(project.api_token, [raw], False, None)
        event = normalize_event(raw, envelope, now_ms=clock.now_ms(), ip=None, geoip=None)
        if type(event) is not Event:
            return 0
        try:
            outcome = await self._store.ingest(project.id, [event], [])
        except Exception:
            self._seen.discard((project.id, distinct_id, key, response))
            logs.logger.warning("recording an OFREP flag read failed", exc_info=True)
            return 0
        return outcome.ingested
