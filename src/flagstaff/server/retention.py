"""A worker's retention job: on PostgreSQL, run the store's retention pass now and then.

Every worker of every node calls it; the store lets one run at a time (an advisory lock) and
the others return at once. On SQLite the pass does nothing: the ingest writer process deletes
(``store/sqlite/retention.py``). The interval is ``FLAGSTAFF_RETENTION_CHECK_SECONDS`` (15 s),
so a changed setting applies within it; a pass that stopped with expired rows left goes on
after a short pause.
"""

from __future__ import annotations

import logging

from flagstaff.common import clock
from flagstaff.ops import logs
from flagstaff.server.job_loop import run_forever
from flagstaff.store.base import Store

CONTINUE_AFTER_SECONDS = 0.5


async def retention_loop(store: Store, interval: float) -> None:
    async def step() -> float | None:
        progress = await store.retention_pass(clock.now_ms())
        if progress is None:
            return None
        if progress.events or progress.warnings or progress.partitions_dropped:
            logs.log(
                logging.INFO,
                "retention removed expired events",
                events=progress.events,
                ingestion_warnings=progress.warnings,
                partitions_dropped=progress.partitions_dropped,
            )
        return None if progress.done else CONTINUE_AFTER_SECONDS

    await run_forever(step, what="retention pass", interval=interval)
