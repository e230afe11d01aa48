"""Password hashing with argon2id (argon2-cffi), and the password policy."""

from __future__ import annotations

import msgspec
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 1024

# argon2-cffi's defaults follow RFC 9106's second recommended option (64 MiB, 3 passes).
_HASHER = PasswordHasher()


class Verified(msgspec.Struct, frozen=True):
    """The outcome of checking a password. ``new_hash`` is set when the stored hash should be
    replaced (its parameters are older than the current ones)."""

    ok: bool
    new_hash: str | None = None


def password_problem(password: str) -> str | None:
    """Why ``password`` cannot be used, or None."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"the password must have at least {MIN_PASSWORD_LENGTH} characters"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"the password must have at most {MAX_PASSWORD_LENGTH} characters"
    if not password.strip():
        return "the password must not be only spaces"
    return None


def hash_password(password: str, hasher: PasswordHasher = _HASHER) -> str:
    return hasher.hash(password)


def verify_password(stored_hash: str, password: str, hasher: PasswordHasher = _HASHER) -> Verified:
    try:
        hasher.verify(stored_hash, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return Verified(ok=False)
    if hasher.check_needs_rehash(stored_hash):
        return Verified(ok=True, new_hash=hasher.hash(password))
    return Verified(ok=True)


# Verifying against this when the email is unknown keeps both paths equally slow, so response
# times do not tell which emails have accounts.
_DUMMY_HASH = _HASHER.hash("flagstaff-no-such-user")


def burn_verification(password: str, hasher: PasswordHasher = _HASHER) -> None:
    verify_password(_DUMMY_HASH, password, hasher)
