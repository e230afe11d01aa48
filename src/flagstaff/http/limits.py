"""Limits that keep anonymous traffic from stalling a worker: slow bodies, big bodies, memory.

- :class:`BodyReaders` puts a timeout on every wait for body bytes and, when too many requests
  wait at once, sheds the one idle longest, so slow or stalled uploads cannot hold every slot
  of the worker (granian's ``backpressure``) and real clients keep getting answers.
- :class:`MemoryBudget` admits large bodies by the memory their decoding may take: beyond the
  worker's budget the request is refused with 503 and ``Retry-After``, which the SDKs retry.
- :class:`MemoryBudget` also hands freed heap back to the system once a burst of large bodies
  is done (:func:`flagstaff.ops.allocator.release_memory`).

See docs/operations.md for the figures and the settings.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from flagstaff.application.errors import ApiError
from flagstaff.ops.allocator import release_memory

__all__ = ["BodyReaders", "MemoryBudget", "linger_bytes"]

DECODE_FACTOR = 6
"""Peak memory of decoding a body, per body byte (raw + inflated text + parsed objects)."""
LARGE_BODY = 1024 * 1024
"""Bodies below this are admitted without counting: SDK batches are far smaller."""
RETRY_AFTER_SECONDS = 2
TRIM_AFTER_BYTES = 8 * 1024 * 1024
"""Large bodies decoded since the last trim before memory is handed back to the system."""


MAX_URL_BYTES = 8192
"""Longer URLs (path and query) are answered 414 with a JSON body by the app, as nginx does
past its 8 KB request line. granian (hyper) answers URLs over 64 KB itself, 414 with an empty
body; keeping the limit here, well below, gives every client the JSON answer."""
LINGER_SECONDS = 5.0
"""After an answer given before the request's body was read (413, 503), the server reads and
discards the rest of the body for at most this long before it closes the connection: closed
with unread bytes, the kernel resets the connection and the client, still sending, never
sees the answer (nginx's lingering close)."""
LINGER_LIMITS = 4
"""A lingering read discards at most this many body limits (or the declared length, if
smaller): a client that sends more still sees its connection reset."""


def linger_bytes(declared: int, limit: int) -> int:
    """How much of an unread body to discard after an early answer."""
    return min(max(declared, limit), LINGER_LIMITS * limit)


REAP_INTERVAL_SECONDS = 0.5
"""How often a worker looks for uploads past their deadline: timeouts fire this much late."""
SHED_MIN_IDLE_SECONDS = 1.0
"""An upload is shed only once it has sent nothing for this long. While every waiting upload
is younger, newcomers are admitted beyond the limit and the reaper sheds the excess as it
ages, so a flood of new uploads cannot push out a request whose body is on its way."""


class _Reader:
    __slots__ = ("deadline", "expired", "task")

    def __init__(self, deadline: float, task: asyncio.Task[object] | None) -> None:
        self.deadline = deadline
        self.task = task
        self.expired = False


class BodyReaders:
    """The requests of one worker that are waiting for body bytes.

    No timer per request: readers sit in a dict ordered by their last progress (so by
    deadline), and one reaper task per worker, alive while anyone waits, wakes every
    :data:`REAP_INTERVAL_SECONDS` and cancels the tasks whose deadline passed. Beyond
    ``max_waiting`` the idlest are shed (cancelled), once idle for ``min_idle``: at once when a
    new reader arrives, else by the reaper. A timer per request (``asyncio.timeout``) cost
    about 11% of a ``/flags`` request's instructions.
    """

    def __init__(
        self, timeout: float, max_waiting: int, min_idle: float = SHED_MIN_IDLE_SECONDS
    ) -> None:
        self.timeout = timeout
        self.max_waiting = max_waiting
        self.min_idle = min_idle
        self._waiting: dict[int, _Reader] = {}
        self._reaper: asyncio.Task[None] | None = None
        self.shed = 0

    def begin(self, reader_id: int) -> _Reader:
        """Register a reader (most recent last); with too many waiting, shed the idlest."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        waiting = self._waiting
        if len(waiting) >= self.max_waiting:
            self._shed_idle(now, self.max_waiting - 1)
        reader = waiting[reader_id] = _Reader(now + self.timeout, asyncio.current_task())
        if self._reaper is None:
            self._reaper = loop.create_task(self._reap())
        return reader

    def progress(self, reader_id: int, reader: _Reader) -> None:
        """Bytes arrived: the reader's clock restarts and it moves to the back of the queue."""
        waiting = self._waiting
        if waiting.pop(reader_id, None) is not None:
            waiting[reader_id] = reader
        reader.deadline = asyncio.get_running_loop().time() + self.timeout

    def end(self, reader_id: int) -> None:
        self._waiting.pop(reader_id, None)

    def __len__(self) -> int:
        return len(self._waiting)

    async def _reap(self) -> None:
        loop = asyncio.get_running_loop()
        waiting = self._waiting
        try:
            while waiting:
                await asyncio.sleep(REAP_INTERVAL_SECONDS)
                now = loop.time()
                while waiting:
                    reader_id = next(iter(waiting))
                    if waiting[reader_id].deadline > now:
                        break
                    _expire(waiting.pop(reader_id))
                self._shed_idle(now, self.max_waiting)
        finally:
            self._reaper = None

    def _shed_idle(self, now: float, keep: int) -> None:
        """Shed the idlest readers until ``keep`` remain, sparing those idle under
        :attr:`min_idle` (the reaper sheds them later if they stay idle)."""
        waiting = self._waiting
        last_progress_before = now - self.min_idle + self.timeout
        while len(waiting) > keep:
            reader_id = next(iter(waiting))
            if waiting[reader_id].deadline > last_progress_before:
                break
            _expire(waiting.pop(reader_id))
            self.shed += 1


def _expire(reader: _Reader) -> None:
    if not reader.expired and reader.task is not None:
        reader.expired = True
        reader.task.cancel()


class MemoryBudget:
    """Bytes a worker may spend at once on decoding bodies of at least :data:`LARGE_BODY`."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.in_use = 0
        self.refused = 0
        self._since_trim = 0

    def admit(self, body_bytes: int) -> int:
        """Reserve memory for decoding a body; 0 for small bodies. Raises a 503 beyond budget."""
        if body_bytes < LARGE_BODY:
            return 0
        cost = body_bytes * DECODE_FACTOR
        if self.in_use and self.in_use + cost > self.budget:
            self.refused += 1
            raise ApiError(
                503,
                "server_busy",
                "too many large requests are being decoded right now: retry shortly",
            )
        self.in_use += cost
        return cost

    def release(self, cost: int) -> None:
        if not cost:
            return
        self.in_use -= cost
        self._since_trim += cost
        if self.in_use == 0 and self._since_trim >= TRIM_AFTER_BYTES * DECODE_FACTOR:
            self._since_trim = 0
            release_memory()


class BodyTimeout:
    """``async with`` around the body reads of one request (see :meth:`BodyReaders.begin`):
    a reader cancelled for its deadline or shed leaves as a 408."""

    __slots__ = ("id", "reader", "readers")

    def __init__(self, readers: BodyReaders, reader_id: int) -> None:
        self.readers = readers
        self.id = reader_id
        self.reader = readers.begin(reader_id)

    async def __aenter__(self) -> BodyTimeout:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.readers.end(self.id)
        reader = self.reader
        if reader.expired and exc_type is asyncio.CancelledError and reader.task is not None:
            reader.task.uncancel()
            raise ApiError(408, "body_timeout", "the request body did not arrive in time") from None
