"""Projects, their members and personal API keys: what the management API, the console and the
``flagstaff`` command do with them.

A project is created with a name (the API also makes its creator an admin and gives them a key)
and renamed, given an event retention and experiments' stats defaults by :func:`update_project`.
Members and keys live in the caller's :class:`~flagstaff.accounts.store.AccountStore`: their
use cases take ``Caller[object]`` (no store of their own). Members are Flagstaff's own (PostHog
keeps members per organization and invites them; here roles are per project and an admin adds a
member directly): :func:`add_member` adds an existing user or creates one with an initial
password (an existing user's password is never changed), :func:`change_role` and
:func:`remove_member` keep an admin in the project (the store checks it in the change's
transaction: ``Conflict("role")``), :func:`end_sessions` logs a member out everywhere. Users
revoke their own keys; admins any key of the project.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import msgspec

from flagstaff.accounts import passwords, sessions, throttle
from flagstaff.accounts.api_keys import key_json
from flagstaff.accounts.records import ApiKeyInfo, Membership, Role, User
from flagstaff.accounts.roles import Action, Principal, can, can_revoke_key
from flagstaff.accounts.store import AccountStore
from flagstaff.accounts.users import email_problem, normalize_email
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError, existing, invalid_input
from flagstaff.application.inputs import UNSET, UnsetType, given
from flagstaff.common import clock
from flagstaff.common.clock import ms_to_iso
from flagstaff.common.errors import Conflict
from flagstaff.experiments.model import ExperimentInvalid, parse_stats_defaults
from flagstaff.store.records import Project
from flagstaff.store.retention import retention_problem

__all__ = [
    "MAX_KEY_LABEL",
    "MAX_PROJECT_NAME",
    "AddedMember",
    "CreatedKey",
    "CreatedProject",
    "Member",
    "MemberInput",
    "MemberRoleInput",
    "PersonalApiKeyInput",
    "ProjectInput",
    "ProjectReads",
    "ProjectSettings",
    "ProjectStore",
    "ProjectUpdate",
    "add_member",
    "added_member_json",
    "api_key_json",
    "change_role",
    "create_key",
    "create_project",
    "created_key_json",
    "created_project_json",
    "end_sessions",
    "event_retention",
    "experiment_stats_defaults",
    "find_project",
    "join_project",
    "list_keys",
    "list_members",
    "list_projects",
    "member_json",
    "new_project",
    "project_json",
    "project_settings",
    "project_settings_json",
    "remove_member",
    "revoke_key",
    "update_project",
]

MAX_PROJECT_NAME = 200
MAX_KEY_LABEL = 100


# request bodies ------------------------------------------------------------------------------


class ProjectInput(msgspec.Struct):
    """A new project (POST /api/projects/)."""

    name: str


class ProjectUpdate(msgspec.Struct):
    """Any of: a new name, how many days events are kept (1-36500, null: forever), the stats
    defaults of new experiments."""

    name: str | UnsetType = UNSET
    event_retention_days: int | UnsetType | None = UNSET
    experiment_stats_defaults: dict[str, Any] | UnsetType | None = UNSET
    """Replaces the project's stats defaults of new experiments (null or {}: none)."""


class PersonalApiKeyInput(msgspec.Struct):
    label: str
    """At most 100 characters."""


class MemberInput(msgspec.Struct):
    email: str
    role: Role
    password: str | None = None
    """The initial password of a user who does not exist yet (ignored for an existing one)."""


class MemberRoleInput(msgspec.Struct):
    role: Role


# what the use cases need of the store ----------------------------------------------------------


class ProjectReads(Protocol):
    """A project and its settings, as they are."""

    async def get_project(self, project_id: int) -> Project | None: ...

    async def get_event_retention(self, project_id: int) -> int | None: ...

    async def get_experiment_stats_defaults(self, project_id: int) -> dict[str, Any]: ...


class ProjectStore(ProjectReads, Protocol):
    """A project and its settings."""

    async def create_project(self, name: str) -> Project: ...

    async def rename_project(self, project_id: int, name: str) -> Project | None: ...

    async def set_event_retention(self, project_id: int, days: int | None) -> bool: ...

    async def set_experiment_stats_defaults(
        self, project_id: int, defaults: dict[str, Any]
    ) -> bool: ...


# what the use cases answer ----------------------------------------------------------------------


class CreatedProject(msgspec.Struct, frozen=True):
    """A new project and its creator's personal API key (the secret, shown once)."""

    project: Project
    personal_api_key: str


class ProjectSettings(msgspec.Struct, frozen=True):
    """The project with its settings."""

    project: Project
    event_retention_days: int | None
    experiment_stats_defaults: dict[str, Any]


class Member(msgspec.Struct, frozen=True):
    """A user and their membership of the project."""

    user: User
    membership: Membership


class AddedMember(msgspec.Struct, frozen=True):
    """A member just added, and whether their user was created for it."""

    member: Member
    created_user: bool


class CreatedKey(msgspec.Struct, frozen=True):
    """A new personal API key and its value (shown once)."""

    key: ApiKeyInfo
    value: str


# as the API shows them ---------------------------------------------------------------------------


def project_json(project: Project) -> dict[str, Any]:
    return {
        "id": project.id,
        "uuid": project.uuid,
        "name": project.name,
        "api_token": project.api_token,
        "created_at": project.created_at,
    }


def created_project_json(created: CreatedProject) -> dict[str, Any]:
    return {**project_json(created.project), "personal_api_key": created.personal_api_key}


def project_settings_json(settings: ProjectSettings) -> dict[str, Any]:
    return {
        **project_json(settings.project),
        "event_retention_days": settings.event_retention_days,
        "experiment_stats_defaults": settings.experiment_stats_defaults,
    }


def _iso(ms: int | None) -> str | None:
    return ms_to_iso(ms) if ms is not None else None


def member_json(member: Member) -> dict[str, Any]:
    user, membership = member.user, member.membership
    return {
        "id": user.id,
        "user": {"id": user.id, "email": user.email, "first_name": user.first_name},
        "role": membership.role.value,
        "joined_at": _iso(membership.created_at_ms),
        "last_login": _iso(user.last_login_ms),
        "single_sign_on": user.oidc_issuer is not None,
    }


def added_member_json(added: AddedMember) -> dict[str, Any]:
    return {**member_json(added.member), "created_user": added.created_user}


def api_key_json(key: ApiKeyInfo) -> dict[str, Any]:
    return key_json(key, ms_to_iso)


def created_key_json(created: CreatedKey) -> dict[str, Any]:
    return {**api_key_json(created.key), "value": created.value}


# projects ---------------------------------------------------------------------------------------


def _project_name(name: str) -> str:
    """``name`` trimmed; refused when blank."""
    name = name.strip()
    if not name:
        raise ApiError(400, "required", "name is required", "name")
    return name


def _new_name(name: str) -> str:
    """A project's new name: trimmed, at most :data:`MAX_PROJECT_NAME` characters."""
    name = _project_name(name)
    if len(name) > MAX_PROJECT_NAME:
        raise ApiError(
            400, "invalid_input", f"name has at most {MAX_PROJECT_NAME} characters", "name"
        )
    return name


async def new_project(store: ProjectStore, body: ProjectInput) -> Project:
    """A project and nothing else (``flagstaff project create``)."""
    return await store.create_project(_project_name(body.name))


async def create_project(caller: Caller[ProjectStore], body: ProjectInput) -> CreatedProject:
    """A project whose creator is its admin, with a personal API key for it (shown once)."""
    project = await new_project(caller.store, body)
    user_id = caller.principal.user_id
    if user_id is not None:
        await caller.accounts.set_membership(user_id, project.id, Role.ADMIN, clock.now_ms())
    _, secret = await caller.accounts.create_user_key(
        project.id, user_id, f"{project.name} key", clock.now_ms()
    )
    return CreatedProject(project, secret)


async def find_project(store: ProjectReads, project_id: int) -> Project | None:
    """Project ``project_id``, if there is one."""
    return await store.get_project(project_id)


async def event_retention(store: ProjectReads, project_id: int) -> int | None:
    """Days the project keeps events; None: forever."""
    return await store.get_event_retention(project_id)


async def experiment_stats_defaults(store: ProjectReads, project_id: int) -> dict[str, Any]:
    """The ``stats_config`` fields a new experiment of the project takes when it leaves them
    out ({}: PostHog's)."""
    return await store.get_experiment_stats_defaults(project_id)


class ProjectList(Protocol):
    async def list_projects(self) -> list[Project]: ...


async def all_projects(store: ProjectList) -> list[Project]:
    """Every project of the node, oldest first (the operator's CLI)."""
    return await store.list_projects()


async def list_projects(caller: Caller[ProjectStore]) -> list[Project]:
    """The caller's project (a principal acts in one)."""
    project = await find_project(caller.store, caller.project_id)
    return [project] if project is not None else []


async def project_settings(caller: Caller[ProjectStore]) -> ProjectSettings:
    """The project with its settings (event retention, experiments' stats defaults)."""
    project = existing(await find_project(caller.store, caller.project_id), "project")
    return await _settings(caller, project)


async def _settings(caller: Caller[ProjectStore], project: Project) -> ProjectSettings:
    return ProjectSettings(
        project,
        await event_retention(caller.store, caller.project_id),
        await experiment_stats_defaults(caller.store, caller.project_id),
    )


async def update_project(caller: Caller[ProjectStore], body: ProjectUpdate) -> ProjectSettings:
    """Rename the project, set its event retention and/or its experiments' stats defaults:
    everything is checked before anything is written."""
    if not given(body):
        raise ApiError(400, "required", "name is required", "name")
    name = None if isinstance(body.name, UnsetType) else _new_name(body.name)
    defaults = None
    if not isinstance(body.experiment_stats_defaults, UnsetType):
        raw = body.experiment_stats_defaults
        try:
            defaults = parse_stats_defaults({} if raw is None else raw)
        except ExperimentInvalid as error:
            raise invalid_input(error) from None
    days = body.event_retention_days
    if not isinstance(days, UnsetType):
        problem = retention_problem(days)
        if problem is not None:
            raise ApiError(400, "invalid_input", problem, "event_retention_days")
    store, project_id = caller.store, caller.project_id
    if defaults is not None and not await store.set_experiment_stats_defaults(project_id, defaults):
        raise ApiError(404, "not_found", "no such project")
    if not isinstance(days, UnsetType) and not await store.set_event_retention(project_id, days):
        raise ApiError(404, "not_found", "no such project")
    if name is not None:
        project = await store.rename_project(project_id, name)
    else:
        project = await store.get_project(project_id)
    return await _settings(caller, existing(project, "project"))


# members -----------------------------------------------------------------------------------------


class MemberReads(Protocol):
    """What reading a project's members, their keys and a user's projects needs."""

    async def list_members(self, project_id: int) -> list[tuple[User, Membership]]: ...

    async def list_memberships(self, user_id: int) -> list[Membership]: ...

    async def list_keys(self, project_id: int, user_id: int | None) -> list[ApiKeyInfo]: ...


async def project_members(accounts: MemberReads, project_id: int) -> list[Member]:
    """The project's members (the API's list and the console's members page)."""
    return [Member(u, m) for u, m in await accounts.list_members(project_id)]


async def memberships(accounts: MemberReads, user_id: int) -> list[Membership]:
    """The projects a user belongs to, with their role in each (a console sign-in's choice)."""
    return await accounts.list_memberships(user_id)


async def list_members(caller: Caller[object]) -> list[Member]:
    return await project_members(caller.accounts, caller.project_id)


async def _user(accounts: AccountStore, email: str, password: str | None) -> tuple[User, bool]:
    """The user with ``email`` (normalised), created with ``password`` when there is none
    (an existing user's password is never changed), and whether it was created."""
    email = normalize_email(email)
    problem = email_problem(email)
    if problem is not None:
        raise ApiError(400, "invalid_input", problem, "email")
    user = await accounts.find_user_by_email(email)
    if user is not None:
        return user, False
    if not password:
        raise ApiError(400, "required", "a new user needs an initial password", "password")
    weakness = passwords.password_problem(password)
    if weakness is not None:
        raise ApiError(400, "invalid_input", weakness, "password")
    hashed = await asyncio.to_thread(passwords.hash_password, password)
    try:
        return await accounts.create_user(email, hashed, clock.now_ms()), True
    except Conflict:  # created meanwhile (another request, another node starting)
        user = await accounts.find_user_by_email(email)
        if user is None:
            raise
        return user, False


async def add_member(caller: Caller[object], body: MemberInput) -> AddedMember:
    """Add the user with ``email`` (created with ``password`` when there is none) with
    ``role``; a member already is refused (their role is changed by :func:`change_role`)."""
    user, created = await _user(caller.accounts, body.email, body.password)
    if not created and await caller.accounts.get_membership(user.id, caller.project_id):
        raise ApiError(
            400, "unique", "this user is a member already; change their role instead", "email"
        )
    membership = await caller.accounts.change_membership(
        user.id, caller.project_id, body.role, clock.now_ms(), caller.source
    )
    assert membership is not None
    return AddedMember(Member(user, membership), created)


async def join_project(
    accounts: AccountStore,
    email: str,
    password: str,
    role: Role,
    project_id: int,
    *,
    break_glass: bool = False,
) -> tuple[User, bool]:
    """The user with ``email``, a member of ``project_id`` with ``role`` (an existing member
    keeps their role), created with ``password`` when absent: ``flagstaff user create`` and the
    console's first admin at start. ``break_glass``: the user may log in by password even when
    single sign-on is the only way in. Returns the user and whether it was created."""
    user, created = await _user(accounts, email, password)
    if created or await accounts.get_membership(user.id, project_id) is None:
        await accounts.set_membership(user.id, project_id, role, clock.now_ms())
    if break_glass:
        await accounts.set_break_glass(user.id)
    return user, created


async def _member(caller: Caller[object], user_id: int) -> User:
    user = await caller.accounts.get_user(user_id)
    membership = await caller.accounts.get_membership(user_id, caller.project_id)
    if user is None or membership is None:
        raise ApiError(404, "not_found", "no such member")
    return user


async def change_role(caller: Caller[object], user_id: int, body: MemberRoleInput) -> Member:
    """A member's new role (the project keeps an admin: 400 ``role`` otherwise)."""
    user = await _member(caller, user_id)
    membership = await caller.accounts.change_membership(
        user.id, caller.project_id, body.role, clock.now_ms(), caller.source
    )
    if membership is None:
        raise ApiError(404, "not_found", "no such member")
    return Member(user, membership)


async def remove_member(caller: Caller[object], user_id: int) -> None:
    """The member leaves the project (not its last admin: 400 ``role``)."""
    user = await _member(caller, user_id)
    await caller.accounts.change_membership(
        user.id, caller.project_id, None, clock.now_ms(), caller.source
    )


async def end_sessions(caller: Caller[object], user_id: int) -> int:
    """Log the member out everywhere at once (every console session; keys are not touched):
    how many sessions ended."""
    user = await _member(caller, user_id)
    return await caller.accounts.end_user_sessions(
        caller.project_id, user.id, caller.source, clock.now_ms()
    )


# personal API keys -------------------------------------------------------------------------------


async def keys_seen_by(
    accounts: MemberReads, project_id: int, principal: Principal
) -> list[ApiKeyInfo]:
    """Those who manage the project (admins, and a key without a user) see every key of
    the project, others their own."""
    everyone = principal.user_id is None or can(principal.role, Action.MANAGE)
    return await accounts.list_keys(project_id, None if everyone else principal.user_id)


async def list_keys(caller: Caller[object]) -> list[ApiKeyInfo]:
    """The keys the caller sees (:func:`keys_seen_by`), newest first."""
    keys = await keys_seen_by(caller.accounts, caller.project_id, caller.principal)
    return sorted(keys, key=lambda k: -k.id)


# a person's own password and sessions (the console's account page, logging out) ------------


class PasswordStore(Protocol):
    async def set_password_hash(self, user_id: int, password_hash: str) -> None: ...

    async def delete_user_sessions(self, user_id: int, keep_session_id: int | None) -> int: ...


async def change_password(
    accounts: PasswordStore, user: User, keep_session_id: int, current: str, new: str
) -> int:
    """Set the user's new password once the current one is checked and the new one is strong
    enough (else a 400 naming the field); the user's other sessions end. How many ended."""
    if not passwords.verify_password(user.password_hash, current).ok:
        raise ApiError(
            400, "invalid_input", "The current password is not right.", "current_password"
        )
    weakness = passwords.password_problem(new)
    if weakness is not None:
        raise ApiError(400, "invalid_input", weakness.capitalize() + ".", "new_password")
    await accounts.set_password_hash(user.id, passwords.hash_password(new))
    return await accounts.delete_user_sessions(user.id, keep_session_id)


class SessionEnd(Protocol):
    async def delete_session(self, token_hash: str) -> None: ...


async def log_out(accounts: SessionEnd, token_hash: str) -> None:
    """End one console session (its token's hash)."""
    await accounts.delete_session(token_hash)


async def create_key(caller: Caller[object], body: PersonalApiKeyInput) -> CreatedKey:
    """A new key for the caller; its ``value`` is in this answer only."""
    label = body.label
    if not label.strip():
        raise ApiError(400, "required", "label is required", "label")
    if len(label) > MAX_KEY_LABEL:
        raise ApiError(
            400, "invalid_input", f"label is longer than {MAX_KEY_LABEL} characters", "label"
        )
    info, secret = await caller.accounts.create_user_key(
        caller.project_id, caller.principal.user_id, label.strip(), clock.now_ms(), caller.source
    )
    return CreatedKey(info, secret)


async def revoke_key(caller: Caller[object], key_id: int) -> None:
    """Revoke a key of the project: the caller's own, or any as an admin (revoking a revoked
    key changes nothing)."""
    keys = await caller.accounts.list_keys(caller.project_id, None)
    key = next((k for k in keys if k.id == key_id), None)
    if key is None:
        raise ApiError(404, "not_found", "no such personal API key")
    problem = can_revoke_key(caller.principal, key.user_id)
    if problem is not None:
        raise ApiError(403, "permission_denied", problem)
    if not key.revoked:
        await caller.accounts.revoke_key(caller.project_id, key_id, clock.now_ms(), caller.source)


# housekeeping --------------------------------------------------------------------------------


class Housekeeping(Protocol):
    async def delete_expired_sessions(self, now_ms: int, idle_before_ms: int) -> int: ...

    async def prune_login_attempts(self, before_ms: int) -> int: ...


async def housekeeping(
    accounts: Housekeeping,
    now_ms: int,
    session_policy: sessions.SessionPolicy = sessions.DEFAULT_POLICY,
    throttle_policy: throttle.ThrottlePolicy = throttle.DEFAULT_THROTTLE,
) -> None:
    """Delete sessions past their lifetime or idle timeout, and login attempts the throttle
    no longer counts."""
    await accounts.delete_expired_sessions(now_ms, now_ms - session_policy.idle_timeout_ms)
    await accounts.prune_login_attempts(now_ms - throttle_policy.window_ms)
