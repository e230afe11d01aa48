"""A worker's retention job: on PostgreSQL, run the store's retention pass now and then.

Every worker of every node calls it; the store lets one run at a time (an advisory lock) and
the others return at once. On SQLite the pass does nothing: the ingest writer process deletes
(``store/sqlite/retention.py``). The interval is ``FLAGSTAFF_RETENTION_CHECK_SECONDS`` (15 s),
so a changed setting applies within it; a pass that stopped with expired rows left goes on
after a short pause.
"""

from __future__ import annotations

import asyncio
import logging
import time

from flagstaff.ops import logs
from flagstaff.store.base import Store

CONTINUE_AFTER_SECONDS = 0.5


async def retention_loop(store: Store, interval: float) -> None:
    while True:
        pause = interval
        try:
            progress = await store.retention_pass(int(time.time() * 1000))
            if progress is not None:
                if progress.events or progress.warnings or progress.partitions_dropped:
                    logs.log(
                        logging.INFO,
                        "retention removed expired events",
                        events=progress.events,
                        ingestion_warnings=progress.warnings,
                        partitions_dropped=progress.partitions_dropped,
                    )
                if not progress.done:
                    pause = CONTINUE_AFTER_SECONDS
        except asyncio.CancelledError:
            raise
        except Exception:  # a database hiccup must not end the loop
            logs.logger.exception("retention pass failed")
        await asyncio.sleep(pause)
