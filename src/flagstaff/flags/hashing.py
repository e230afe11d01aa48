"""PostHog's bucketing hashes, bit for bit.

``bucket(prefix, identifier, salt)`` is ``int(sha1(prefix + identifier + salt)[:15 hex], 16)
/ 0xFFFFFFFFFFFFFFF``: the first 60 bits of the digest scaled into [0, 1]. Flag prefixes are
``b"<flag key>."``; the holdout prefix is ``b"holdout-"``.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable

# For one-shot hashes of these short inputs CPython's built-in SHA-1 beats OpenSSL's, whose
# per-call context set-up dominates (docs/benchmarks.md, "SHA-1 for bucketing").
try:
    from _sha1 import sha1  # type: ignore[import-not-found]  # CPython's private module, unstubbed
except ImportError:  # pragma: no cover - other interpreters
    from hashlib import sha1

SCALE = float(0xFFFFFFFFFFFFFFF)
first_64_bits = struct.Struct(">Q").unpack_from
HOLDOUT_PREFIX = b"holdout-"
VARIANT_SALT = b"variant"


def bucket(prefix: bytes, identifier: bytes, salt: bytes = b"") -> float:
    return (first_64_bits(sha1(prefix + identifier + salt).digest())[0] >> 4) / SCALE


def _least_passing(passes: Callable[[float], bool]) -> int:
    """The least 64-bit digest prefix whose bucket passes ``passes`` (monotone: false, then
    true, as buckets grow), or ``2**64`` if none."""
    low, high = 0, 1 << 60
    while low < high:
        middle = (low + high) // 2
        if passes(middle / SCALE):
            high = middle
        else:
            low = middle + 1
    return low << 4


# Generated flag code compares a digest's first 64 bits with these limits instead of
# scaling each hash to a float; the results are exactly the float comparisons', NaN and
# infinite bounds included (an empty identifier hashes to 0 and bucket 0.0 alike).


@functools.lru_cache(maxsize=4096)
def rollout_limit(threshold: float) -> int:
    """``bucket > threshold`` exactly when the digest prefix is at least this."""
    return _least_passing(lambda bucket: bucket > threshold)


@functools.lru_cache(maxsize=4096)
def variant_limit(upper: float) -> int:
    """``bucket < upper`` exactly when the digest prefix is below this."""
    return _least_passing(lambda bucket: not bucket < upper)
