"""OpenAPI bodies of the team routes (members, groups; see :mod:`flagstaff.http.schemas`)."""

from __future__ import annotations

from typing import Literal

import msgspec

from flagstaff.http.schemas import Group

RoleName = Literal["admin", "editor", "viewer"]


class MemberUser(msgspec.Struct):
    id: int
    email: str
    first_name: str


class Member(msgspec.Struct):
    id: int
    """The user's id (the path's ``user_id``)."""
    user: MemberUser
    role: RoleName
    joined_at: str
    last_login: str | None
    single_sign_on: bool
    """Whether the user signs in through the OpenID Connect provider (roles come from it)."""


class CreatedMember(Member):
    created_user: bool
    """Whether the user was created by this request (with the given password)."""


class MemberPage(msgspec.Struct):
    count: int
    next: str | None
    previous: str | None
    results: list[Member]


class EndedSessions(msgspec.Struct):
    ended_sessions: int
    """How many console sessions were ended."""


class GroupPage(msgspec.Struct):
    next: str | None
    previous: str | None
    results: list[Group]
