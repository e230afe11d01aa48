"""PostHog's bucketing hashes, bit for bit.

``bucket(prefix, identifier, salt)`` is ``int(sha1(prefix + identifier + salt)[:15 hex], 16)
/ 0xFFFFFFFFFFFFFFF``: the first 60 bits of the digest scaled into [0, 1]. Flag prefixes are
``b"<flag key>."``; the holdout prefix is ``b"holdout-"``.
"""

from __future__ import annotations

import struct

try:  # CPython's built-in SHA-1 is faster than OpenSSL's for short inputs.
    from _sha1 import sha1
except ImportError:  # pragma: no cover - other interpreters
    from hashlib import sha1

SCALE = float(0xFFFFFFFFFFFFFFF)
first_64_bits = struct.Struct(">Q").unpack_from
HOLDOUT_PREFIX = b"holdout-"
VARIANT_SALT = b"variant"


def bucket(prefix: bytes, identifier: bytes, salt: bytes = b"") -> float:
    return (first_64_bits(sha1(prefix + identifier + salt).digest())[0] >> 4) / SCALE


def flag_bucket(flag_key: str, identifier: str, salt: str = "") -> float:
    """Convenience form taking text, for tests and tools."""
    return bucket(f"{flag_key}.".encode(), identifier.encode(), salt.encode())


def holdout_bucket(identifier: str) -> float:
    return bucket(HOLDOUT_PREFIX, identifier.encode())
