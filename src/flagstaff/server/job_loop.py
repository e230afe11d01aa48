"""The loop every periodic worker job runs in, written once: call the job's step, wait, again,
until cancelled. A failure never ends the loop: a storage outage is logged once per outage
(``server/outage.py``), anything else with its traceback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from flagstaff.ops import logs
from flagstaff.server.outage import OUTAGE
from flagstaff.store.faults import is_unavailable

Step = Callable[[], Awaitable[float | None]]
"""One run of a job; it may ask for a shorter pause before the next (None: the interval)."""


async def run_forever(step: Step, *, what: str, interval: float) -> None:
    """Run ``step`` every ``interval`` seconds; ``what`` names the job in log lines."""
    while True:
        pause = interval
        try:
            sooner = await step()
            if sooner is not None:
                pause = sooner
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a database hiccup must not end the loop
            if is_unavailable(exc):
                OUTAGE.failed(exc, what)  # once per outage
            else:
                logs.logger.exception("%s failed", what)
        await asyncio.sleep(pause)
