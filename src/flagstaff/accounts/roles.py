"""Roles per project and the one permission check used by the console and the management API.

Both ways in (a console session, a Bearer personal key) end as a :class:`Principal`; handlers
ask :func:`permission_problem` (or :func:`action_for_method` first) and never look at roles
themselves, so the console and the API cannot disagree.
"""

from __future__ import annotations

import enum

import msgspec

from flagstaff.accounts.records import Role


class Action(enum.StrEnum):
    VIEW = "view"  # read flags, cohorts, persons, events, activity
    EDIT = "edit"  # create, change, delete, roll back flags and cohorts; schedule changes
    APPROVE = "approve"  # approve someone else's pending change
    MANAGE = "manage"  # members, roles, settings, webhooks, approval policy, others' keys


class AuthMethod(enum.StrEnum):
    SESSION = "session"
    PERSONAL_KEY = "personal_key"


_ALLOWED: dict[Role, frozenset[Action]] = {
    Role.VIEWER: frozenset({Action.VIEW}),
    Role.EDITOR: frozenset({Action.VIEW, Action.EDIT, Action.APPROVE}),
    Role.ADMIN: frozenset(Action),
}


class Principal(msgspec.Struct, frozen=True):
    """Who is asking, in which project, with which role.

    ``user_id`` is None only for personal keys created before accounts existed (the bootstrap
    key): they act as admins of their project, as they always did.
    """

    project_id: int
    role: Role
    method: AuthMethod
    user_id: int | None = None
    email: str = ""
    key_id: int | None = None


def parse_role(value: object) -> Role | None:
    try:
        return Role(value)  # type: ignore[arg-type]  # any value: Role() refuses non-members
    except ValueError:
        return None


def can(role: Role, action: Action) -> bool:
    return action in _ALLOWED[role]


def action_for_method(method: str) -> Action:
    """The default action of a management API request: reads view, everything else edits."""
    return Action.VIEW if method.upper() in ("GET", "HEAD", "OPTIONS") else Action.EDIT


def permission_problem(principal: Principal, action: Action) -> str | None:
    """Why ``principal`` may not do ``action``, or None. Answered as 403 ``permission_denied``."""
    if can(principal.role, action):
        return None
    if principal.role is Role.VIEWER:
        return "viewers can look but not change anything in this project"
    return f"this needs the admin role; you are {principal.role.value}"


def can_approve(
    principal: Principal, author_user_id: int | None, author_key_id: int | None = None
) -> str | None:
    """Why ``principal`` may not approve a change made by ``author_user_id`` (or, for a key
    with no user, by ``author_key_id``), or None: approval needs a second person."""
    problem = permission_problem(principal, Action.APPROVE)
    if problem is not None:
        return problem
    if principal.user_id is not None:
        same = principal.user_id == author_user_id
    else:
        same = author_user_id is None and principal.key_id == author_key_id
    if same:
        return "a change must be approved by someone other than its author"
    return None


def leaves_no_admin(current: Role | None, new: Role | None, other_admins: int) -> bool:
    """Whether changing a member from ``current`` to ``new`` (None: not a member) would leave
    the project with no admin; stores check it in the change's transaction."""
    return current is Role.ADMIN and new is not Role.ADMIN and other_admins == 0


def can_revoke_key(principal: Principal, key_user_id: int | None) -> str | None:
    """Users revoke their own keys; admins revoke any key of the project."""
    if principal.user_id is not None and principal.user_id == key_user_id:
        return None
    return permission_problem(principal, Action.MANAGE)
