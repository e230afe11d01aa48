"""Login throttling: failed attempts per email and per IP address in a sliding window.

A pure class fed with timestamps. Under PostgreSQL (several nodes) the window is rebuilt from
the stored attempts (:meth:`LoginThrottle.from_attempts`) so all nodes agree; on one machine
the same class may also live in memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import msgspec

from flagstaff.accounts.records import LoginAttempt


class ThrottlePolicy(msgspec.Struct, frozen=True):
    window_ms: int = 15 * 60_000
    max_failures_per_email: int = 5
    max_failures_per_ip: int = 20


DEFAULT_THROTTLE = ThrottlePolicy()


class ThrottleDecision(msgspec.Struct, frozen=True):
    allowed: bool
    retry_after_s: int = 0
    reason: str = ""


class LoginThrottle:
    def __init__(self, policy: ThrottlePolicy = DEFAULT_THROTTLE) -> None:
        self.policy = policy
        self._by_email: dict[str, deque[int]] = {}
        self._by_ip: dict[str, deque[int]] = {}

    @classmethod
    def from_attempts(
        cls, attempts: Iterable[LoginAttempt], policy: ThrottlePolicy = DEFAULT_THROTTLE
    ) -> LoginThrottle:
        throttle = cls(policy)
        for attempt in sorted(attempts, key=lambda a: a.at_ms):
            if attempt.succeeded:
                throttle.record_success(attempt.email, attempt.at_ms)
            else:
                throttle.record_failure(attempt.email, attempt.ip, attempt.at_ms)
        return throttle

    def _prune(self, times: deque[int], now_ms: int) -> None:
        start = now_ms - self.policy.window_ms
        while times and times[0] <= start:
            times.popleft()

    def _blocked_for(self, times: deque[int] | None, limit: int, now_ms: int) -> int:
        if not times:
            return 0
        self._prune(times, now_ms)
        if len(times) < limit:
            return 0
        # Blocked until enough of the oldest failures leave the window to go under the limit.
        release = times[len(times) - limit] + self.policy.window_ms
        return max(1, -(-(release - now_ms) // 1000))

    def check(self, email: str, ip: str, now_ms: int) -> ThrottleDecision:
        """Whether a login attempt for ``email`` from ``ip`` may be verified now."""
        by_email = self._blocked_for(
            self._by_email.get(email), self.policy.max_failures_per_email, now_ms
        )
        by_ip = self._blocked_for(self._by_ip.get(ip), self.policy.max_failures_per_ip, now_ms)
        if by_email or by_ip:
            reason = (
                "too many failed logins for this account"
                if by_email
                else ("too many failed logins from this address")
            )
            return ThrottleDecision(False, max(by_email, by_ip), reason)
        return ThrottleDecision(True)

    def record_failure(self, email: str, ip: str, now_ms: int) -> None:
        for table, key in ((self._by_email, email), (self._by_ip, ip)):
            times = table.setdefault(key, deque())
            times.append(now_ms)
            self._prune(times, now_ms)

    def record_success(self, email: str, now_ms: int) -> None:
        """A correct password clears the account's failures (not the address's)."""
        self._by_email.pop(email, None)
