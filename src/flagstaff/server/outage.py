"""One log line per storage outage, not one per refused request.

A database that restarts for a few seconds under load makes hundreds of requests fail; each
is answered 503, and :class:`Outage` logs the first failure (with its exception), counts the
rest, and logs once more when the database answers again (how long, how many refused). A
failure long after the previous one starts a new outage even if no success was seen between.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from flagstaff.ops import logs

QUIET_AFTER_SECONDS = 60.0
"""A failure this long after the previous one is logged as a new outage."""
SETTLED_AFTER_SECONDS = 1.0
"""A success ends the outage only this long after the last failure: while a restarted
database is reconnected one pooled connection at a time, successes and failures alternate,
and that is still one outage."""


class Outage:
    """The storage outage state of one process (the worker's event loop: no locking)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.down = False
        self.since = 0.0
        self.last = 0.0
        self.refused = 0
        self.outages = 0

    def failed(self, exc: BaseException, where: str) -> bool:
        """Record a request refused because storage failed; True when this one was logged."""
        now = self._clock()
        first = not self.down or now - self.last > QUIET_AFTER_SECONDS
        self.last = now
        if first:
            self.down = True
            self.since = now
            self.refused = 1
            self.outages += 1
            logs.logger.error(
                "storage unavailable: answering 503 until it is back (logged once per outage)",
                exc_info=exc,
                extra={"fields": {"path": where, "error": type(exc).__name__}},
            )
            return True
        self.refused += 1
        return False

    def recovered(self) -> None:
        """A write went through again (an ingested batch, a management write): close the
        outage with one line. Reads do not count: on SQLite they work while the ingest writer
        is down."""
        if not self.down or self._clock() - self.last < SETTLED_AFTER_SECONDS:
            return
        self.down = False
        logs.log(
            logging.WARNING,
            "storage available again",
            seconds=round(self._clock() - self.since, 3),
            refused=self.refused,
        )


OUTAGE = Outage()
"""This process's outage state, shared by every route (see :mod:`flagstaff.http.unavailable`)."""
