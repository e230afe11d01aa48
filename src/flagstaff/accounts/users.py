"""Email addresses as account identifiers, and creating a project's member."""

from __future__ import annotations

import re

from flagstaff.accounts.passwords import hash_password, password_problem
from flagstaff.accounts.records import Role, User
from flagstaff.accounts.store import AccountStore
from flagstaff.common.errors import Conflict

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


class UserError(ValueError):
    """Why a user cannot be created (a bad email or password)."""


async def create_member(
    accounts: AccountStore,
    email: str,
    password: str,
    role: Role,
    project_id: int,
    now_ms: int,
) -> tuple[User, bool]:
    """The user with ``email``, a member of ``project_id`` with ``role``; created with
    ``password`` when absent (an existing user's password is never overwritten). Returns the
    user and whether it was created."""
    email = normalize_email(email)
    problem = email_problem(email)
    if problem is not None:
        raise UserError(problem)
    user = await accounts.find_user_by_email(email)
    created = user is None
    if user is None:
        problem = password_problem(password)
        if problem is not None:
            raise UserError(problem)
        try:
            user = await accounts.create_user(email, hash_password(password), now_ms)
        except Conflict:  # created meanwhile by another node starting
            user = await accounts.find_user_by_email(email)
            if user is None:
                raise
            created = False
    if await accounts.get_membership(user.id, project_id) is None or created:
        await accounts.set_membership(user.id, project_id, role, now_ms)
    return user, created
