"""Email addresses as account identifiers (a project's members are added by
``application/accounts.py``)."""

from __future__ import annotations

import re

MAX_EMAIL_LENGTH = 254
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def normalize_email(email: str) -> str:
    """The form emails are stored and looked up in: trimmed, lower case."""
    return email.strip().lower()


def email_problem(email: str) -> str | None:
    """Why ``email`` (normalised) cannot name an account, or None."""
    if not email:
        return "the email is required"
    if len(email) > MAX_EMAIL_LENGTH:
        return f"the email must have at most {MAX_EMAIL_LENGTH} characters"
    if not _EMAIL.match(email):
        return "the email must look like name@example.com"
    return None
