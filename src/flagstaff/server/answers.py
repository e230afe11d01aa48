"""Whole /flags answers kept per worker, for the requests people repeat (every page load of a
logged-in user asks the same question again).

An answer is reused only while nothing it was computed from has moved:

- the request itself: the key holds the raw body with what decodes it (content type and
  encoding, the ``compression`` parameter), the answer's shape (v2 or legacy), the evaluation
  runtime detected from the headers, and the client IP when GeoIP fills properties;
- the project's definitions version (a management write moves it);
- the store's person version (:meth:`Store.answers_version`): every commit that changes persons,
  distinct ids, groups, hash-key overrides or static cohort members moves it, before the write
  is acknowledged, so a request sent after a 200 never gets an answer computed before it;
- the clock, for answers whose evaluation compared against the current time (a relative date,
  see :class:`flagstaff.flags.dates.ClockReads`): kept only within the second they were
  computed in, as the engine resolves relative bounds once a second.

Answers that failed in part (store unreachable, dependency cycle) and quota-limited ones are
never kept. The ``requestId`` and ``evaluatedAt`` of every answer are new: the cache holds the
flags part only. Stores that cannot tell when persons change (PostgreSQL, where other nodes
write) give no person version, and nothing is kept.

The entries are bounded in bytes (``--flags-answer-cache-mb``); beyond it the least recently
used go first. The estimate is an upper bound of what an entry takes (measured with tracemalloc
in ``tests/unit/test_answer_cache.py``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

ENTRY_OVERHEAD = 800
"""Bytes an entry costs beyond its key's body and its parts: the key tuple, the record, the
body's header, the head tuple's header, the view of the first fragment and its buffer, the
ordered dict's slot and link (measured: about 680, and up to a third more while the dict's
table has just doubled). It was 240, which let 16 MB of estimate hold 25 MB."""
PART_OVERHEAD = 8
"""Bytes a part shared with the definitions' fragments costs (a pointer in the tuple)."""


class CachedAnswer:
    """The flags part of one answer and what it was computed from."""

    __slots__ = ("count", "definitions", "head", "person", "second", "size")

    def __init__(
        self,
        head: tuple[bytes | memoryview, ...],
        count: int,
        definitions: int,
        person: int,
        second: int,
        size: int,
    ) -> None:
        self.head = head
        """The answer up to its other fields (``{"flags":{...}`` or the legacy pair), as
        parts to join."""
        self.count = count
        """Flags evaluated (for the metrics)."""
        self.definitions = definitions
        self.person = person
        self.second = second
        """The epoch second it is valid in, or -1 when its evaluation did not read the clock."""
        self.size = size


class AnswerCache:
    """Encoded /flags answers of one worker, bounded in bytes, the least recently used dropped
    first (an ordered dict: dropping the first key of a plain dict that keeps losing its first
    keys scans every freed slot before it, ~29 µs at 20,000 entries against ~1 µs)."""

    __slots__ = ("_entries", "bytes", "hits", "limit", "misses")

    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self.bytes = 0
        self._entries: OrderedDict[Any, CachedAnswer] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Any, definitions: int, person: int) -> CachedAnswer | None:
        """The answer kept for ``key`` if still valid at these versions and this second."""
        entry = self._entries.get(key)
        if entry is not None:
            if (
                entry.person == person
                and entry.definitions == definitions
                and (entry.second < 0 or entry.second == int(time.time()))
            ):
                self.hits += 1
                self._entries.move_to_end(key)
                return entry
            self._drop(key)
        self.misses += 1
        return None

    def put(
        self,
        key: Any,
        head: tuple[bytes | memoryview, ...],
        count: int,
        definitions: int,
        person: int,
        reads_clock: bool,
    ) -> None:
        """Keep an answer; ``key`` is a tuple whose last item is the request's body."""
        size = len(key[-1]) + ENTRY_OVERHEAD + parts_size(head)
        if size > self.limit:
            return
        second = int(time.time()) if reads_clock else -1
        entries = self._entries
        old = entries.pop(key, None)
        if old is not None:
            self.bytes -= old.size
        entries[key] = CachedAnswer(head, count, definitions, person, second, size)
        self.bytes += size
        while self.bytes > self.limit:
            self.bytes -= entries.popitem(last=False)[1].size

    def _drop(self, key: Any) -> None:
        entry = self._entries.pop(key)
        self.bytes -= entry.size

    def __len__(self) -> int:
        return len(self._entries)


def parts_size(head: tuple[bytes | memoryview, ...]) -> int:
    """What a kept answer's parts cost the cache: a pointer each, plus the bytes of those it
    owns. A one-part answer (the legacy shape, no flags) owns its buffer; a v2 answer owns its
    two framing parts, every part between them being a fragment of the definitions'
    (``http.flags.v2_parts``)."""
    if len(head) == 1:
        return len(head[0]) + PART_OVERHEAD
    return PART_OVERHEAD * len(head) + len(head[0]) + len(head[-1])
