"""Surveys, early access features and survey aggregates on PostgreSQL (mixed into the store).

A save writes the flags it maintains, then its own row, in one transaction; every save bumps
the project's definitions version (with its NOTIFY), which the per-worker survey cache
follows. :func:`count_survey_events` is the ingest path's part, in the events' transaction.
"""

from __future__ import annotations

from collections.abc import Iterable

import asyncpg
import msgspec

from flagstaff.activity.records import ChangeSource
from flagstaff.store.base import Conflict, FlagWrite, Page, SurveysSnapshot
from flagstaff.store.postgres.flag_writes import bump_definitions, write_flag
from flagstaff.store.rows import now_iso
from flagstaff.surveys import stats
from flagstaff.surveys.early_access import EarlyAccessFeature
from flagstaff.surveys.model import Survey

_encode = msgspec.json.encode


def _survey(data: str) -> Survey:
    return msgspec.json.decode(data, type=Survey)


def _feature(data: str) -> EarlyAccessFeature:
    return msgspec.json.decode(data, type=EarlyAccessFeature)


async def apply_flag_writes(
    conn: asyncpg.Connection,
    project_id: int,
    writes: Iterable[FlagWrite],
    now: str,
    source: ChangeSource | None,
) -> dict[str, int]:
    """Write (and log) each flag; returns the ids of created flags by their ``target`` field."""
    created: dict[str, int] = {}
    for w in writes:
        flag = await write_flag(conn, project_id, w.data, now, source, w.flag_id)
        if w.flag_id is None and w.target is not None:
            created[w.target] = int(flag["id"])
    return created


class SurveyMethods:
    """The survey and early access part of the PostgreSQL store."""

    pool: asyncpg.Pool  # the store's

    # surveys ------------------------------------------------------------------------------

    async def list_surveys(self, project_id: int, limit: int, offset: int) -> Page:
        async with self.pool.acquire() as conn:
            count = await conn.fetchval(
                "SELECT count(*) FROM surveys WHERE project_id = $1", project_id
            )
            rows = await conn.fetch(
                "SELECT data::text FROM surveys WHERE project_id = $1 "
                "ORDER BY created_at DESC, id LIMIT $2 OFFSET $3",
                project_id,
                limit,
                offset,
            )
        return Page(count, [_survey(r[0]) for r in rows])

    async def get_survey(self, project_id: int, survey_id: str) -> Survey | None:
        data = await self.pool.fetchval(
            "SELECT data::text FROM surveys WHERE project_id = $1 AND id = $2",
            project_id,
            survey_id,
        )
        return _survey(data) if data is not None else None

    async def survey_names(self, project_id: int) -> set[str]:
        rows = await self.pool.fetch("SELECT name FROM surveys WHERE project_id = $1", project_id)
        return {r[0] for r in rows}

    async def save_survey(
        self,
        project_id: int,
        survey: Survey,
        flags: list[FlagWrite],
        *,
        create: bool,
        source: ChangeSource | None = None,
    ) -> Survey:
        now = now_iso()
        async with self.pool.acquire() as conn, conn.transaction():
            created = await apply_flag_writes(conn, project_id, flags, now, source)
            saved = msgspec.structs.replace(survey, **created) if created else survey
            data = _encode(saved).decode()
            try:
                async with conn.transaction():
                    if create:
                        await conn.execute(
                            "INSERT INTO surveys (id, project_id, name, archived, data, "
                            "created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6)",
                            saved.id,
                            project_id,
                            saved.name,
                            saved.archived,
                            data,
                            now,
                        )
                        status = "INSERT 0 1"
                    else:
                        status = await conn.execute(
                            "UPDATE surveys SET name = $3, archived = $4, data = $5, "
                            "updated_at = $6 WHERE project_id = $1 AND id = $2",
                            project_id,
                            saved.id,
                            saved.name,
                            saved.archived,
                            data,
                            now,
                        )
            except asyncpg.UniqueViolationError:
                raise Conflict("name", "There is already a survey with this name.") from None
            if status.endswith(" 0"):
                raise Conflict("id", "the survey was deleted meanwhile")
            await bump_definitions(conn, project_id)
        return saved

    async def delete_survey(
        self,
        project_id: int,
        survey_id: str,
        flags: list[FlagWrite],
        *,
        source: ChangeSource | None = None,
    ) -> None:
        now = now_iso()
        async with self.pool.acquire() as conn, conn.transaction():
            await apply_flag_writes(conn, project_id, flags, now, source)
            await conn.execute(
                "DELETE FROM surveys WHERE project_id = $1 AND id = $2", project_id, survey_id
            )
            await conn.execute(
                "DELETE FROM survey_aggregates WHERE project_id = $1 AND survey_id = $2",
                project_id,
                survey_id,
            )
            await bump_definitions(conn, project_id)

    async def survey_aggregates(
        self, project_id: int, survey_ids: list[str] | None
    ) -> dict[str, stats.SurveyStats]:
        if survey_ids is None:
            rows = await self.pool.fetch(
                "SELECT a.survey_id, a.state FROM survey_aggregates a JOIN surveys s "
                "ON s.id = a.survey_id WHERE a.project_id = $1",
                project_id,
            )
        else:
            rows = await self.pool.fetch(
                "SELECT survey_id, state FROM survey_aggregates "
                "WHERE project_id = $1 AND survey_id = ANY($2::text[])",
                project_id,
                survey_ids,
            )
        return {r[0]: stats.decode(bytes(r[1])) for r in rows}

    # early access features ----------------------------------------------------------------

    async def list_early_access_features(self, project_id: int, limit: int, offset: int) -> Page:
        async with self.pool.acquire() as conn:
            count = await conn.fetchval(
                "SELECT count(*) FROM early_access_features WHERE project_id = $1", project_id
            )
            rows = await conn.fetch(
                "SELECT data::text FROM early_access_features WHERE project_id = $1 "
                "ORDER BY created_at DESC, id LIMIT $2 OFFSET $3",
                project_id,
                limit,
                offset,
            )
        return Page(count, [_feature(r[0]) for r in rows])

    async def get_early_access_feature(
        self, project_id: int, feature_id: str
    ) -> EarlyAccessFeature | None:
        data = await self.pool.fetchval(
            "SELECT data::text FROM early_access_features WHERE project_id = $1 AND id = $2",
            project_id,
            feature_id,
        )
        return _feature(data) if data is not None else None

    async def early_access_feature_of_flag(self, project_id: int, flag_id: int) -> str | None:
        found: str | None = await self.pool.fetchval(
            "SELECT id FROM early_access_features WHERE project_id = $1 AND feature_flag_id = $2",
            project_id,
            flag_id,
        )
        return found

    async def save_early_access_feature(
        self,
        project_id: int,
        feature: EarlyAccessFeature,
        flags: list[FlagWrite],
        *,
        create: bool,
        source: ChangeSource | None = None,
    ) -> EarlyAccessFeature:
        now = now_iso()
        async with self.pool.acquire() as conn, conn.transaction():
            created = await apply_flag_writes(conn, project_id, flags, now, source)
            saved = msgspec.structs.replace(feature, **created) if created else feature
            data = _encode(saved).decode()
            try:
                async with conn.transaction():
                    if create:
                        await conn.execute(
                            "INSERT INTO early_access_features (id, project_id, "
                            "feature_flag_id, data, created_at) VALUES ($1, $2, $3, $4, $5)",
                            saved.id,
                            project_id,
                            saved.feature_flag_id,
                            data,
                            now,
                        )
                    else:
                        await conn.execute(
                            "UPDATE early_access_features SET data = $3 "
                            "WHERE project_id = $1 AND id = $2",
                            project_id,
                            saved.id,
                            data,
                        )
            except asyncpg.UniqueViolationError:
                raise Conflict(
                    "feature_flag_id", "This flag already has a feature attached to it."
                ) from None
            await bump_definitions(conn, project_id)
        return saved

    async def delete_early_access_feature(
        self,
        project_id: int,
        feature_id: str,
        flags: list[FlagWrite],
        *,
        source: ChangeSource | None = None,
    ) -> None:
        now = now_iso()
        async with self.pool.acquire() as conn, conn.transaction():
            await apply_flag_writes(conn, project_id, flags, now, source)
            await conn.execute(
                "DELETE FROM early_access_features WHERE project_id = $1 AND id = $2",
                project_id,
                feature_id,
            )
            await bump_definitions(conn, project_id)

    async def surveys_snapshot(self, project_id: int) -> SurveysSnapshot:
        async with (
            self.pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            surveys = [
                _survey(r[0])
                for r in await conn.fetch(
                    "SELECT data::text FROM surveys WHERE project_id = $1 AND NOT archived "
                    "ORDER BY created_at, id",
                    project_id,
                )
            ]
            features = [
                _feature(r[0])
                for r in await conn.fetch(
                    "SELECT data::text FROM early_access_features WHERE project_id = $1 "
                    "ORDER BY created_at, id",
                    project_id,
                )
            ]
            responses = {
                r[0]: r[1]
                for r in await conn.fetch(
                    "SELECT survey_id, responses FROM survey_aggregates WHERE project_id = $1",
                    project_id,
                )
            }
            ids: set[int] = set()
            for s in surveys:
                ids.update(
                    i
                    for i in (s.linked_flag_id, s.targeting_flag_id, s.internal_targeting_flag_id)
                    if i is not None
                )
            ids.update(f.feature_flag_id for f in features if f.feature_flag_id is not None)
            keys: dict[int, str] = {}
            if ids:
                keys = {
                    r[0]: r[1]
                    for r in await conn.fetch(
                        "SELECT id, key FROM feature_flags WHERE project_id = $1 AND NOT deleted "
                        "AND id = ANY($2::bigint[])",
                        project_id,
                        sorted(ids),
                    )
                }
        return SurveysSnapshot(surveys, features, keys, responses)
