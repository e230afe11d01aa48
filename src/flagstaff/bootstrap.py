"""First-start set-up: the project and personal key named in the environment, or new ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flagstaff.accounts.keys import check_personal_key, check_project_token
from flagstaff.config import Settings
from flagstaff.store.base import Store

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
        if await store.find_personal_key(key_value) is None:
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
    return notices
