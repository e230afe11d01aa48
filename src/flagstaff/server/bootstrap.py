"""First-start set-up: the project and personal key named in the environment, or new ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flagstaff.accounts.keys import check_personal_key, check_project_token
from flagstaff.accounts.records import Role
from flagstaff.accounts.store import AccountStore
from flagstaff.application.accounts import join_project
from flagstaff.application.errors import ApiError
from flagstaff.server.config import Settings
from flagstaff.store.base import Project, Store

FIRST_START_MESSAGE = (
    "Flagstaff created a project and a personal API key. They are shown only now: "
    "project_token is for the SDKs, personal_api_key for the management API"
)


@dataclass(frozen=True)
class Notice:
    """One thing the start created, logged once as a JSON line with ``fields``."""

    message: str
    fields: dict[str, Any] = field(default_factory=dict)


async def bootstrap(store: Store, settings: Settings) -> list[Notice]:
    """Create what is missing; returns what to log once (secrets only when just created).

    Idempotent: run at every start, it creates nothing the second time.
    """
    notices: list[Notice] = []
    token = settings.init_project_token
    key_value = settings.init_personal_api_key
    project = None
    if token:
        problem = check_project_token(token)
        if problem is not None:
            raise ValueError(f"FLAGSTAFF_INIT_PROJECT_TOKEN: {problem}")
        project = await store.get_project_by_token(token)
        if project is None:
            project = await store.create_project("Default project", token)
            notices.append(
                Notice("created the project", {"project_id": project.id, "project_token": token})
            )
    if key_value:
        problem = check_personal_key(key_value)
        if problem is not None:
            raise ValueError(f"FLAGSTAFF_INIT_PERSONAL_API_KEY: {problem}")
        if await _accounts(store).find_key(key_value) is None:  # a revoked one stays revoked
            if project is None:
                projects = await store.list_projects()
                project = projects[0] if projects else await store.create_project("Default project")
            await store.create_personal_key(project.id, "bootstrap key", key_value)
            notices.append(Notice("created the personal API key", {"project_id": project.id}))
    if not token and not key_value and not await store.list_projects():
        project = await store.create_project("Default project")
        _, secret = await store.create_personal_key(project.id, "first key")
        notices.append(
            Notice(
                FIRST_START_MESSAGE,
                {
                    "project_id": project.id,
                    "project_token": project.api_token,
                    "personal_api_key": secret,
                },
            )
        )
    if settings.init_admin_email:
        notices += await _init_admin(store, settings, project)
    if await _accounts(store).count_users() == 0:
        notices.append(_no_admin_yet(settings))
    return notices


def _no_admin_yet(settings: Settings) -> Notice:
    """How to open the console while nobody can log in: the exact command that makes the
    first admin (said at every start until there is one)."""
    where = (
        f" --database-url {settings.database_url}"
        if settings.database_url
        else f" --data-dir {settings.data_dir}"
    )
    if settings.oidc_issuer is not None and settings.oidc_only:
        where += " --break-glass"  # the only password login single sign-on leaves
    command = f"flagstaff user create --email you@example.com --password -{where}"
    return Notice(
        f"the console at http://{settings.host}:{settings.port}/ has no user yet: create its "
        f"first admin with: {command} (the password is read from stdin)",
        {"console_url": f"http://{settings.host}:{settings.port}/", "command": command},
    )


def _accounts(store: Store) -> AccountStore:
    return store


async def _init_admin(store: Store, settings: Settings, project: Project | None) -> list[Notice]:
    """The console's first admin (``FLAGSTAFF_INIT_ADMIN_EMAIL``/``_PASSWORD``), created on
    the bootstrap project when absent; an existing user's password is never changed."""
    if project is None:
        projects = await store.list_projects()
        project = projects[0] if projects else await store.create_project("Default project")
    try:
        user, created = await join_project(
            _accounts(store),
            settings.init_admin_email or "",
            settings.init_admin_password or "",
            Role.ADMIN,
            project.id,
        )
    except ApiError as exc:
        raise ValueError(f"FLAGSTAFF_INIT_ADMIN_EMAIL/PASSWORD: {exc.detail}") from None
    if not created:
        return []
    return [Notice("created the console admin", {"email": user.email, "project_id": project.id})]
