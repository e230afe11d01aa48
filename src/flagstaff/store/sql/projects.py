"""Projects, their bootstrap personal keys, group types and ingestion warnings' listing (a
mixin of both stores)."""

from __future__ import annotations

import uuid
from typing import Any, Protocol

import orjson

from flagstaff.accounts import keys
from flagstaff.accounts.api_keys import key_prefix
from flagstaff.common import clock
from flagstaff.store.records import Conflict, Page, PersonalKey, Project
from flagstaff.store.rows import (
    PERSONAL_KEY_COLUMNS,
    PROJECT_COLUMNS,
    WARNING_COLUMNS,
    group_type_change,
    now_iso,
    warning_record,
)
from flagstaff.store.sql.db import Db, Tx, UniqueViolation, insert_id, page

_INSERT_PROJECT = (
    "INSERT INTO projects (uuid, name, api_token, created_at) VALUES ($1, $2, $3, $4) RETURNING id"
)


class ProjectMethods(Protocol):
    sql: Db

    async def create_project(self, name: str, api_token: str | None = None) -> Project:
        token = api_token or keys.new_project_token()
        project_uuid = str(uuid.uuid4())
        created = now_iso()

        async def write(tx: Tx) -> int:
            project_id = await insert_id(tx, _INSERT_PROJECT, project_uuid, name, token, created)
            await tx.bump_definitions(project_id)
            return project_id

        try:
            project_id = await self.sql.write(write)
        except UniqueViolation:
            raise Conflict.project_token_taken() from None
        return Project(project_id, project_uuid, name, token, created)

    async def list_projects(self) -> list[Project]:
        rows = await self.sql.fetch(f"SELECT {PROJECT_COLUMNS} FROM projects ORDER BY id")
        return [Project(*row) for row in rows]

    async def get_project(self, project_id: int) -> Project | None:
        row = await self.sql.fetchrow(
            f"SELECT {PROJECT_COLUMNS} FROM projects WHERE id = $1", project_id
        )
        return Project(*row) if row else None

    async def get_experiment_stats_defaults(self, project_id: int) -> dict[str, Any]:
        """The project's defaults of a new experiment's ``stats_config`` ({}: PostHog's)."""
        value = await self.sql.fetchval(
            "SELECT experiment_stats_defaults FROM projects WHERE id = $1", project_id
        )
        return orjson.loads(value) if value else {}

    async def set_experiment_stats_defaults(
        self, project_id: int, defaults: dict[str, Any]
    ) -> bool:
        """Replace them ({}: none); False when the project does not exist."""
        text = orjson.dumps(defaults).decode() if defaults else None

        async def write(tx: Tx) -> bool:
            row = await tx.fetchrow(
                "UPDATE projects SET experiment_stats_defaults = $2 WHERE id = $1 RETURNING id",
                project_id,
                text,
            )
            return row is not None

        return await self.sql.write(write)

    async def get_project_by_token(self, api_token: str) -> Project | None:
        row = await self.sql.fetchrow(
            f"SELECT {PROJECT_COLUMNS} FROM projects WHERE api_token = $1", api_token
        )
        return Project(*row) if row else None

    async def create_personal_key(
        self, project_id: int, label: str, value: str | None = None
    ) -> tuple[PersonalKey, str]:
        secret = value or keys.new_personal_key()
        created = now_iso()
        mask = keys.mask_key(secret)
        try:
            key_id = await self.sql.write(
                lambda tx: tx.fetchval(
                    "INSERT INTO personal_api_keys (project_id, label, secure_value, mask, "
                    "created_at, prefix, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) "
                    "RETURNING id",
                    project_id,
                    label,
                    keys.hash_key(secret),
                    mask,
                    created,
                    key_prefix(secret),
                    clock.now_ms(),
                )
            )
        except UniqueViolation:
            raise Conflict.personal_key_taken() from None
        return PersonalKey(int(key_id), project_id, label, mask, created), secret

    async def find_personal_key(self, value: str) -> PersonalKey | None:
        row = await self.sql.fetchrow(
            f"SELECT {PERSONAL_KEY_COLUMNS} FROM personal_api_keys WHERE secure_value = $1 "
            "AND revoked_at_ms IS NULL AND (user_id IS NULL OR user_id IN "
            "(SELECT id FROM users WHERE is_active))",
            keys.hash_key(value),
        )
        return PersonalKey(*row) if row else None

    # group types ---------------------------------------------------------------------------

    async def list_group_types(self, project_id: int) -> dict[int, str]:
        rows = await self.sql.fetch(
            "SELECT group_type_index, group_type FROM group_types WHERE project_id = $1 "
            "ORDER BY group_type_index",
            project_id,
        )
        return {r[0]: r[1] for r in rows}

    async def create_group_type(self, project_id: int, index: int, name: str) -> bool:
        """Map group type ``index`` to ``name``; False when it is so already (see
        :func:`~flagstaff.store.rows.group_type_change`)."""

        async def write(tx: Tx) -> bool:
            rows = await tx.fetch(
                "SELECT group_type_index, group_type FROM group_types WHERE project_id = $1",
                project_id,
            )
            if not group_type_change({r[0]: r[1] for r in rows}, index, name):
                return False
            await tx.execute(
                "INSERT INTO group_types (project_id, group_type_index, group_type) "
                "VALUES ($1, $2, $3)",
                project_id,
                index,
                name,
            )
            await tx.bump_definitions(project_id)
            return True

        for _ in range(2):
            try:
                return await self.sql.write(write)
            except UniqueViolation:
                continue  # ingestion added a type meanwhile: judge again against it
        raise Conflict("group_type", "group types changed meanwhile; retry")

    # ingestion warnings --------------------------------------------------------------------

    async def list_warnings(self, project_id: int, limit: int, offset: int) -> Page:
        """The project's ingestion warnings, newest first (ingestion keeps the newest
        :data:`~flagstaff.store.rows.WARNINGS_KEPT`)."""
        return await page(
            self.sql, "ingestion_warnings WHERE project_id = $1", WARNING_COLUMNS, "id DESC",
            (project_id,), limit, offset, warning_record,
        )  # fmt: skip
