"""The stream's failures as the capture path sees them (no nats import here)."""

from __future__ import annotations

from flagstaff.store.base import StoreError


class StreamUnavailable(StoreError):
    """JetStream did not acknowledge a batch in time: nothing is promised, the client retries."""
