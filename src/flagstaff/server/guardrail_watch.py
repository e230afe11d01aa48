"""A worker's guardrail watch: every ``guardrail_check_seconds`` (30 s) it judges every
running experiment with guardrail metrics, from the aggregates ingestion keeps current
(:func:`flagstaff.application.experiments.check_guardrails`: a breach is reported once, and
with ``stats_config.auto_stop`` it stops the experiment)."""

from __future__ import annotations

from collections.abc import Callable

from flagstaff.application.experiments import GuardrailStore, check_guardrails
from flagstaff.common import clock
from flagstaff.server.job_loop import run_forever


async def guardrail_loop(
    store: GuardrailStore, on_change: Callable[[], object], poll_seconds: float
) -> None:
    """Every ``poll_seconds`` (``FLAGSTAFF_GUARDRAIL_CHECK_SECONDS``, 30 s: a breach is reported
    within a minute of the data that shows it)."""

    async def step() -> None:
        await check_guardrails(store, clock.now_ms(), on_change)

    await run_forever(step, what="checking experiment guardrails", interval=poll_seconds)
