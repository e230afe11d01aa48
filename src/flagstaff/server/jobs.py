"""A worker's background jobs: running scheduled flag changes when they are due, and now and
then deleting ended console sessions and login attempts older than the throttle's window.

Every worker (and every PostgreSQL node) polls; a due change is claimed by exactly one of them
(the claim marks it executed in the same statement), then applied as an ordinary update
(``application/flags.run_scheduled_change``): the flag rules, the version check and the
activity record (``scheduled_change`` trigger) as any PATCH. A change that cannot apply keeps
its failure for the API to show.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flagstaff.accounts import sessions, throttle
from flagstaff.application.flags import run_scheduled_change
from flagstaff.common import clock
from flagstaff.ops import logs
from flagstaff.server.job_loop import run_forever
from flagstaff.store.base import Store

SCHEDULE_POLL_SECONDS = 1.0
CLAIM_BATCH = 50
HOUSEKEEPING_EVERY_POLLS = 600  # about every ten minutes


async def run_due_changes(
    store: Store, now_ms: int, on_change: Callable[[], object] = lambda: None
) -> int:
    """Claim and apply what is due; how many were claimed. ``on_change`` is called after each
    applied change (the node's change counter, so every worker serves it at once)."""
    claimed = await store.claim_due_changes(now_ms, CLAIM_BATCH)
    for change in claimed:
        failure = await run_scheduled_change(store, change)
        if failure is None:
            on_change()
        else:
            await store.fail_scheduled_change(change.id, failure)
            logs.log(logging.WARNING, "scheduled change failed", id=change.id, failure=failure)
    return len(claimed)


async def housekeeping(
    store: Any,
    now_ms: int,
    session_policy: sessions.SessionPolicy = sessions.DEFAULT_POLICY,
    throttle_policy: throttle.ThrottlePolicy = throttle.DEFAULT_THROTTLE,
) -> None:
    """Delete sessions past their lifetime or idle timeout, and login attempts the throttle
    no longer counts."""
    await store.delete_expired_sessions(now_ms, now_ms - session_policy.idle_timeout_ms)
    await store.prune_login_attempts(now_ms - throttle_policy.window_ms)


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
