"""Reference buckets for the tests: a flag's (or a holdout's) bucket of an identifier, as
the engine hashes it (:func:`flagstaff.flags.hashing.bucket`), taking text."""

from __future__ import annotations

from flagstaff.flags.hashing import HOLDOUT_PREFIX, bucket


def flag_bucket(flag_key: str, identifier: str, salt: str = "") -> float:
    return bucket(f"{flag_key}.".encode(), identifier.encode(), salt.encode())


def holdout_bucket(identifier: str) -> float:
    return bucket(HOLDOUT_PREFIX, identifier.encode())
