"""OpenAPI bodies of the team routes (members, groups) and the cohort CSV upload (see
:mod:`flagstaff.http.schemas`)."""

from __future__ import annotations

from typing import Annotated, Literal

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


class CohortCsvInput(msgspec.Struct, omit_defaults=True):
    """A static cohort from a CSV file (``multipart/form-data``). The file's first column holds
    distinct ids, one per row, or the column headed ``distinct_id``; at most 200,000 ids and
    10 MB. On PATCH the ids are added to the static cohort."""

    csv: Annotated[str, msgspec.Meta(extra_json_schema={"format": "binary"})]
    name: str | None = None
    description: str | None = None
    is_static: bool | None = None
