"""The webhook delivery job each worker runs: ``application/webhooks.deliver_due`` claims the
due deliveries with a lease, this module sends them (httpx, async, signed; redirects not
followed), and the outcome and the next attempt are recorded (``activity/webhooks.py``).

Every worker (and every PostgreSQL node) polls; the store's claim leases each due row to one
of them, so a delivery is not sent by two at once; a worker that dies mid-send leaves its
lease to expire and the row is taken again (receivers should drop an ``X-Flagstaff-Delivery``
id they have seen). Only the lease holder records an outcome.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import httpx

from flagstaff.activity.webhooks import RETRY_DELAYS_S, TIMEOUT_S, request_headers
from flagstaff.application.webhooks import Attempt, deliver_due
from flagstaff.common import clock
from flagstaff.server.job_loop import run_forever
from flagstaff.store.base import Store
from flagstaff.store.webhook_rows import ClaimedDelivery

POLL_SECONDS = 1.0
ERROR_BODY_BYTES = 300
"""Of a failing answer's body, kept as the delivery's last error."""


async def _answer(client: httpx.AsyncClient, claimed: ClaimedDelivery) -> tuple[int, str]:
    headers = request_headers(
        claimed.secret,
        int(time.time()),
        claimed.body,
        claimed.delivery.event,
        claimed.delivery.id,
    )
    async with client.stream("POST", claimed.url, content=claimed.body, headers=headers) as r:
        if 200 <= r.status_code < 300:
            return r.status_code, ""
        head = b""
        async for chunk in r.aiter_bytes():
            head += chunk
            if len(head) >= ERROR_BODY_BYTES:
                break
        text = head[:ERROR_BODY_BYTES].decode("utf-8", "replace").strip()
        return r.status_code, f"answered {r.status_code}" + (f": {text}" if text else "")


async def attempt(client: httpx.AsyncClient, claimed: ClaimedDelivery) -> Attempt:
    """Send one delivery: what the receiver answered, and how long it took."""
    started = time.perf_counter()
    code: int | None
    try:
        code, error = await _answer(client, claimed)
    except httpx.TimeoutException:
        code, error = None, f"no answer within {TIMEOUT_S:g} s"
    except httpx.HTTPError as exc:
        code, error = None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return Attempt(code, error, round((time.perf_counter() - started) * 1000))


async def deliveries_loop(store: Store, delays_s: Sequence[float] = RETRY_DELAYS_S) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False) as client:

        async def send(claimed: ClaimedDelivery) -> Attempt:
            return await attempt(client, claimed)

        async def step() -> None:
            await deliver_due(store, send, clock.now_ms(), delays_s)

        await run_forever(step, what="sending webhook deliveries", interval=POLL_SECONDS)
