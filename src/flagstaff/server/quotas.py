"""Per-project quotas on flag requests and realtime events, counted per minute.

Off by default (a limit of 0). Each worker process counts its own requests against an equal
share of the limit (limit / workers), so no shared counter sits on the hot path; the node as a
whole admits at most the configured number per minute.
"""

from __future__ import annotations

import time


class _Window:
    __slots__ = ("counts", "minute")

    def __init__(self) -> None:
        self.minute = 0
        self.counts: dict[int, int] = {}

    def add(self, project_id: int, n: int, now: float) -> int:
        minute = int(now // 60)
        if minute != self.minute:
            self.minute = minute
            self.counts = {}
        total = self.counts.get(project_id, 0) + n
        self.counts[project_id] = total
        return total


class Quotas:
    def __init__(self, flags_per_minute: int, events_per_minute: int, workers: int) -> None:
        share = max(workers, 1)
        self.flag_limit = -(-flags_per_minute // share) if flags_per_minute else 0
        self.event_limit = -(-events_per_minute // share) if events_per_minute else 0
        self._flags = _Window()
        self._events = _Window()

    def flags_exceeded(self, project_id: int) -> bool:
        """Count one flag request; True once the project is over its flag quota."""
        if not self.flag_limit:
            return False
        return self._flags.add(project_id, 1, time.time()) > self.flag_limit

    def events_allowed(self, project_id: int, n: int) -> int:
        """How many of ``n`` realtime events fit in the project's event quota."""
        if not self.event_limit:
            return n
        total = self._events.add(project_id, n, time.time())
        over = max(total - self.event_limit, 0)
        return max(n - over, 0)
