"""First-start set-up: the project and personal key named in the environment, or new ones."""

from __future__ import annotations

from flagstaff.accounts.keys import check_personal_key, check_project_token
from flagstaff.config import Settings
from flagstaff.store.base import Store


async def bootstrap(store: Store, settings: Settings) -> list[str]:
    """Create what is missing; returns lines to print once (secrets only when just created).

    Idempotent: run at every start, it creates nothing the second time.
    """
    lines: list[str] = []
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
            lines.append(f"created project {project.id} with token {token}")
    if key_value:
        problem = check_personal_key(key_value)
        if problem is not None:
            raise ValueError(f"FLAGSTAFF_INIT_PERSONAL_API_KEY: {problem}")
        if await store.find_personal_key(key_value) is None:
            if project is None:
                projects = await store.list_projects()
                project = projects[0] if projects else await store.create_project("Default project")
            await store.create_personal_key(project.id, "bootstrap key", key_value)
            lines.append(f"created personal API key for project {project.id}")
    if not token and not key_value and not await store.list_projects():
        project = await store.create_project("Default project")
        _, secret = await store.create_personal_key(project.id, "first key")
        lines += [
            "Flagstaff created a project and a personal API key. They are shown only now:",
            f"  project token (for SDKs):          {project.api_token}",
            f"  personal API key (management API): {secret}",
        ]
    return lines
