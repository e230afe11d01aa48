"""In-memory stand-ins for the console's two interfaces (AccountStore, ConsoleData)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import msgspec

from flagstaff.accounts.api_keys import key_prefix
from flagstaff.accounts.records import (
    ApiKeyInfo,
    LoginAttempt,
    Membership,
    Role,
    Session,
    User,
)
from flagstaff.activity.records import StoredActivity
from flagstaff.activity.rollback import FlagVersion
from flagstaff.application import flag_usage
from flagstaff.application.flag_usage import FlagChecks
from flagstaff.console.routes import ProjectInfo
from flagstaff.console.team_views import DynamicCounts
from flagstaff.console.views import EventRow, FlagUsage, PersonFlag
from flagstaff.flags.records import FeatureFlag
from flagstaff.store.base import Group, Page, Project, Usage, Warning
from flagstaff.store.flag_usage import ValueChecks
from flagstaff.store.records import Cohort
from tests.stored_flags import stored_flag


def cohort(cohort_id: int, **fields: Any) -> Cohort:
    """A stored cohort: a dynamic one named after its id unless ``fields`` say otherwise."""
    shown: dict[str, Any] = {
        "name": f"Cohort {cohort_id}",
        "description": "",
        "is_static": False,
        "deleted": False,
        "filters": None,
        "version": 1,
        "count": 0,
        "created_at": "",
        "updated_at": "",
    }
    return Cohort(id=cohort_id, **{**shown, **fields})


class MemoryAccounts:
    def __init__(self) -> None:
        self.users: dict[int, User] = {}
        self.memberships: dict[tuple[int, int], Membership] = {}
        self.sessions: dict[str, Session] = {}
        self.attempts: list[LoginAttempt] = []
        self.keys: dict[int, ApiKeyInfo] = {}
        self.secrets: dict[str, int] = {}

    async def create_user(self, email: str, password_hash: str, now_ms: int) -> User:
        user = User(len(self.users) + 1, email, password_hash, now_ms)
        self.users[user.id] = user
        return user

    async def get_user(self, user_id: int) -> User | None:
        return self.users.get(user_id)

    async def find_user_by_email(self, email: str) -> User | None:
        return next((u for u in self.users.values() if u.email == email), None)

    async def count_users(self) -> int:
        return len(self.users)

    async def set_password_hash(self, user_id: int, password_hash: str) -> None:
        user = self.users[user_id]
        self.users[user_id] = User(user.id, user.email, password_hash, user.created_at_ms)

    async def record_login(self, user_id: int, now_ms: int) -> None:
        return None

    async def set_membership(
        self, user_id: int, project_id: int, role: Role, now_ms: int
    ) -> Membership:
        membership = Membership(user_id, project_id, role, now_ms)
        self.memberships[(user_id, project_id)] = membership
        return membership

    async def get_membership(self, user_id: int, project_id: int) -> Membership | None:
        return self.memberships.get((user_id, project_id))

    async def list_memberships(self, user_id: int) -> list[Membership]:
        return [m for (u, _), m in self.memberships.items() if u == user_id]

    async def list_members(self, project_id: int) -> list[tuple[User, Membership]]:
        return [(self.users[u], m) for (u, p), m in self.memberships.items() if p == project_id]

    async def change_membership(
        self,
        user_id: int,
        project_id: int,
        role: Role | None,
        now_ms: int,
        source: Any = None,
    ) -> Membership | None:
        if role is None:
            self.memberships.pop((user_id, project_id), None)
            return None
        return await self.set_membership(user_id, project_id, role, now_ms)

    async def create_session(
        self,
        user_id: int,
        token_hash: str,
        created_at_ms: int,
        expires_at_ms: int,
        ip: str,
        user_agent: str,
    ) -> Session:
        session = Session(
            len(self.sessions) + 1,
            user_id,
            token_hash,
            created_at_ms,
            created_at_ms,
            expires_at_ms,
            ip,
            user_agent,
        )
        self.sessions[token_hash] = session
        return session

    async def find_session(self, token_hash: str) -> Session | None:
        return self.sessions.get(token_hash)

    async def touch_session(self, session_id: int, now_ms: int) -> None:
        for key, s in self.sessions.items():
            if s.id == session_id:
                self.sessions[key] = Session(
                    s.id, s.user_id, s.token_hash, s.created_at_ms, now_ms, s.expires_at_ms
                )

    async def delete_session(self, token_hash: str) -> None:
        self.sessions.pop(token_hash, None)

    async def delete_user_sessions(self, user_id: int, keep_session_id: int | None) -> int:
        doomed = [
            k for k, s in self.sessions.items() if s.user_id == user_id and s.id != keep_session_id
        ]
        for key in doomed:
            del self.sessions[key]
        return len(doomed)

    async def delete_expired_sessions(self, now_ms: int, idle_before_ms: int) -> int:
        return 0

    async def create_user_key(
        self, project_id: int, user_id: int | None, label: str, now_ms: int
    ) -> tuple[ApiKeyInfo, str]:
        secret = f"phx_{secrets.token_urlsafe(24)}"
        info = ApiKeyInfo(
            id=len(self.keys) + 1,
            project_id=project_id,
            label=label,
            prefix=key_prefix(secret),
            mask=f"{secret[:4]}...{secret[-4:]}",
            created_at_ms=now_ms,
            user_id=user_id,
        )
        self.keys[info.id] = info
        self.secrets[secret] = info.id
        return info, secret

    async def list_keys(self, project_id: int, user_id: int | None) -> list[ApiKeyInfo]:
        return [
            k
            for k in self.keys.values()
            if k.project_id == project_id and (user_id is None or k.user_id == user_id)
        ]

    async def find_key(self, secret: str) -> ApiKeyInfo | None:
        key_id = self.secrets.get(secret)
        return None if key_id is None else self.keys[key_id]

    async def revoke_key(self, project_id: int, key_id: int, now_ms: int) -> ApiKeyInfo | None:
        info = self.keys.get(key_id)
        if info is None or info.project_id != project_id:
            return None
        self.keys[key_id] = msgspec.structs.replace(info, revoked_at_ms=now_ms)
        return self.keys[key_id]

    async def mark_key_used(self, key_id: int, now_ms: int) -> None:
        self.keys[key_id] = msgspec.structs.replace(self.keys[key_id], last_used_ms=now_ms)

    async def record_login_attempt(self, attempt: LoginAttempt) -> None:
        self.attempts.append(attempt)

    async def recent_login_attempts(self, email: str, ip: str, since_ms: int) -> list[LoginAttempt]:
        return [
            a for a in self.attempts if (a.email == email or a.ip == ip) and a.at_ms >= since_ms
        ]

    async def prune_login_attempts(self, before_ms: int) -> int:
        return 0


class MemoryData:
    def __init__(self, flags: list[dict[str, Any]] | None = None) -> None:
        self.flags = flags or []
        self.usage: dict[str, FlagUsage] = {}
        self.checks: dict[str, list[ValueChecks]] = {}
        self.cohorts: list[dict[str, Any]] = [{"id": 3, "name": "Beta <testers>"}]
        self.types: dict[int, str] = {0: "company"}
        self.keys = ["email", "plan"]
        self.activity: list[StoredActivity] = []
        self.versions: dict[int, list[FlagVersion]] = {}

    async def project(self, project_id: int) -> ProjectInfo | None:
        return ProjectInfo(project_id, "Default project") if project_id == 1 else None

    async def list_flags(self, project_id: int) -> list[dict[str, Any]]:
        return self.flags

    async def get_flag(self, project_id: int, flag_id: int) -> FeatureFlag | None:
        found = next((f for f in self.flags if f["id"] == flag_id), None)
        return None if found is None else stored_flag(found, flag_id, found.get("version", 1))

    async def flag_last_seen(self, project_id: int, keys: Sequence[str]) -> dict[str, int]:
        return {
            k: u.last_seen_ms
            for k, u in self.usage.items()
            if k in keys and u.last_seen_ms is not None
        }

    async def flag_usage(
        self, project_id: int, now_ms: int, keys: Sequence[str]
    ) -> dict[str, FlagUsage]:
        return {k: u for k, u in self.usage.items() if k in keys}

    async def flag_checks(self, project_id: int, flag: FeatureFlag, now_ms: int) -> FlagChecks:
        rows = self.checks.get(flag.key, [])
        return flag_usage.flag_checks(rows, now_ms, flag_usage.variant_keys(flag.filters))

    async def group_types(self, project_id: int) -> dict[int, str]:
        return self.types

    async def list_cohorts(self, project_id: int) -> list[dict[str, Any]]:
        return self.cohorts

    async def property_keys(self, project_id: int) -> list[str]:
        return self.keys

    async def flag_activity(self, project_id: int, flag_id: int) -> list[StoredActivity]:
        return [a for a in self.activity if a.record.item_id == str(flag_id)]

    async def flag_versions(self, project_id: int, flag_id: int) -> list[FlagVersion]:
        return self.versions.get(flag_id, [])

    async def recent_events(
        self, project_id: int, event: str | None, distinct_id: str | None, limit: int
    ) -> list[EventRow]:
        return []

    async def events_per_minute(self, project_id: int, start_ms: int, minutes: int) -> list[int]:
        self.chart_start = start_ms
        return [(i * 7) % 5 for i in range(minutes)]


class MemoryTeamData:
    """The team pages' reads, from lists."""

    def __init__(self) -> None:
        self.projects = {1: Project(1, "uuid-1", "Default project", "phc_public_token", "")}
        self.cohort_list: list[Cohort] = []
        self.group_list: list[Group] = []
        self.flags: list[PersonFlag] = []
        self.warning_list: list[Warning] = []
        self.counts = DynamicCounts({}, frozenset(), 0, True)
        self.members: dict[int, list[str]] = {}
        self.retention: dict[int, int] = {}

    async def project(self, project_id: int) -> Project | None:
        return self.projects.get(project_id)

    async def event_retention(self, project_id: int) -> int | None:
        return self.retention.get(project_id)

    async def experiment_stats_defaults(self, project_id: int) -> dict[str, Any]:
        return {}

    async def usage(self, project_id: int) -> Usage:
        return Usage(events=1_000_000, persons=12, flags=3, cohorts=len(self.cohort_list),
                     cap=1_000_000)  # fmt: skip

    def quotas(self) -> tuple[int, int]:
        return (600, 0)

    async def cohorts(self, project_id: int) -> list[Cohort]:
        return self.cohort_list

    async def cohort(self, project_id: int, cohort_id: int) -> Cohort | None:
        return next((c for c in self.cohort_list if c.id == cohort_id), None)

    async def dynamic_counts(
        self, project_id: int, cohorts: list[Cohort], only: list[int] | None = None
    ) -> DynamicCounts:
        return self.counts

    async def static_members(self, project_id: int, cohort_id: int) -> list[str]:
        return self.members.get(cohort_id, [])

    async def group_types(self, project_id: int) -> dict[int, str]:
        return {0: "company"}

    async def groups(
        self, project_id: int, group_type_index: int, search: str, offset: int
    ) -> list[Group]:
        found = [g for g in self.group_list if search.lower() in g.group_key.lower()]
        return found[offset:]

    async def group(self, project_id: int, group_type_index: int, key: str) -> Group | None:
        return next((g for g in self.group_list if g.group_key == key), None)

    async def group_flags(
        self, project_id: int, group_type_name: str, group_type_index: int, key: str
    ) -> list[PersonFlag]:
        return self.flags

    async def warnings(self, project_id: int, limit: int, offset: int) -> Page:
        return Page(len(self.warning_list), self.warning_list[offset : offset + limit])
