"""A worker's background jobs: running scheduled flag changes when they are due, and now and
then deleting ended console sessions and login attempts older than the throttle's window.

Every worker (and every PostgreSQL node) polls; a due change is claimed by exactly one of them
(the claim marks it executed in the same statement), then applied as an ordinary update
(``application/flags.run_due_changes``): the flag rules, the version check and the activity
record (``scheduled_change`` trigger) as any PATCH. A change that cannot apply keeps its
failure for the API to show.
"""

from __future__ import annotations

from collections.abc import Callable

from flagstaff.application.accounts import housekeeping
from flagstaff.application.flags import run_due_changes
from flagstaff.common import clock
from flagstaff.server.job_loop import run_forever
from flagstaff.store.base import Store

SCHEDULE_POLL_SECONDS = 1.0
HOUSEKEEPING_EVERY_POLLS = 600  # about every ten minutes


async def scheduled_changes_loop(store: Store, on_change: Callable[[], object]) -> None:
    polls = 0

    async def step() -> None:
        nonlocal polls
        now_ms = clock.now_ms()
        await run_due_changes(store, now_ms, on_change)
        if polls % HOUSEKEEPING_EVERY_POLLS == 0:
            await housekeeping(store, now_ms)
        polls += 1

    await run_forever(step, what="running scheduled changes", interval=SCHEDULE_POLL_SECONDS)
