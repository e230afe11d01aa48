"""Personal API keys as people see them: a prefix to recognise, last use, revocation."""

from __future__ import annotations

from typing import Any

from flagstaff.accounts.records import ApiKeyInfo

KEY_PREFIX_LENGTH = 8  # "phx_" and four characters of the secret: enough to tell keys apart
LAST_USED_RESOLUTION_MS = 60_000


def key_prefix(secret: str) -> str:
    return secret[:KEY_PREFIX_LENGTH]


def needs_last_used_update(info: ApiKeyInfo, now_ms: int) -> bool:
    """Record a key's use at most once a minute, so authenticated reads stay reads."""
    return info.last_used_ms is None or now_ms - info.last_used_ms >= LAST_USED_RESOLUTION_MS


def key_json(info: ApiKeyInfo, iso: Any) -> dict[str, Any]:
    """A key in the management API's listing (PostHog's names where it has them).

    ``iso`` turns epoch milliseconds into the API's ISO 8601 text."""
    return {
        "id": info.id,
        "label": info.label,
        "mask_value": info.mask,
        "prefix": info.prefix,
        "user_id": info.user_id,
        "created_at": iso(info.created_at_ms),
        "last_used_at": iso(info.last_used_ms) if info.last_used_ms is not None else None,
        "revoked": info.revoked,
        "revoked_at": iso(info.revoked_at_ms) if info.revoked_at_ms is not None else None,
    }
