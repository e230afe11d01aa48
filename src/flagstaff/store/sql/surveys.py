"""Surveys and early access features (a mixin of both stores).

A save writes the flags it maintains, then its own row, in one transaction; every save bumps
the project's definitions version, which the per-worker survey cache follows. Survey
aggregates are counted on the ingest path, in the events' transaction (the engines' own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

import msgspec

from flagstaff.activity.records import ChangeSource
from flagstaff.store.records import Conflict, FlagWrite, Page, SurveysSnapshot
from flagstaff.store.rows import now_iso
from flagstaff.store.sql.db import Db, Reader, Tx, UniqueViolation, by_id, page
from flagstaff.store.sql.flag_writes import write_flag
from flagstaff.surveys import stats
from flagstaff.surveys.early_access import EarlyAccessFeature
from flagstaff.surveys.model import Survey

_encode = msgspec.json.encode
T = TypeVar("T", Survey, EarlyAccessFeature)

_DELETE_AGGREGATE = "DELETE FROM survey_aggregates WHERE project_id = $1 AND survey_id = $2"
_FLAG_KEYS = (
    "SELECT id, key FROM feature_flags WHERE project_id = $1 AND NOT deleted "
    "AND id = ANY($2::bigint[])"
)
_INSERT_SURVEY = (
    "INSERT INTO surveys (project_id, id, name, archived, data, created_at, updated_at) "
    "VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING id"
)
_UPDATE_SURVEY = (
    "UPDATE surveys SET name = $3, archived = $4, data = $5, updated_at = $6 "
    "WHERE project_id = $1 AND id = $2 RETURNING id"
)
_INSERT_FEATURE = (
    "INSERT INTO early_access_features (id, project_id, feature_flag_id, data, created_at) "
    "VALUES ($1, $2, $3, $4, $5) RETURNING id"
)
_UPDATE_FEATURE = (
    "UPDATE early_access_features SET data = $3 WHERE project_id = $1 AND id = $2 RETURNING id"
)


def _survey(data: str | bytes) -> Survey:
    return msgspec.json.decode(data, type=Survey)


def _feature(data: str | bytes) -> EarlyAccessFeature:
    return msgspec.json.decode(data, type=EarlyAccessFeature)


async def apply_flag_writes(
    tx: Tx,
    project_id: int,
    writes: Iterable[FlagWrite],
    now: str,
    source: ChangeSource | None,
) -> dict[str, int]:
    """Write (and log) each flag; returns the ids of created flags by their ``target`` field."""
    created: dict[str, int] = {}
    for w in writes:
        flag = await write_flag(tx, project_id, w, now, source)
        if w.flag_id is None and w.target is not None:
            created[w.target] = flag.id
    return created


def _flag_ids(surveys: list[Survey], features: list[EarlyAccessFeature]) -> list[int]:
    ids: set[int] = set()
    for s in surveys:
        ids.update(
            i
            for i in (s.linked_flag_id, s.targeting_flag_id, s.internal_targeting_flag_id)
            if i is not None
        )
    ids.update(f.feature_flag_id for f in features if f.feature_flag_id is not None)
    return sorted(ids)


class SurveyMethods(Protocol):
    """The survey and early access part of the stores."""

    sql: Db

    # surveys ------------------------------------------------------------------------------

    async def list_surveys(self, project_id: int, limit: int, offset: int) -> Page:
        """Surveys, newest first (``results`` are :class:`Survey`)."""
        return await page(
            self.sql, "surveys WHERE project_id = $1", "data::text", "created_at DESC, id",
            (project_id,), limit, offset, lambda r: _survey(r[0]),
        )  # fmt: skip

    async def get_survey(self, project_id: int, survey_id: str) -> Survey | None:
        row = await by_id(self.sql, "surveys", "data::text", project_id, survey_id)
        return _survey(row[0]) if row is not None else None

    async def survey_names(self, project_id: int) -> set[str]:
        rows = await self.sql.fetch("SELECT name FROM surveys WHERE project_id = $1", project_id)
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
        """Write ``flags`` then the survey (with created flag ids set), in one transaction.

        Conflict on ``name`` (another survey has it) or ``key`` (a flag key is taken).
        """
        sql = _INSERT_SURVEY if create else _UPDATE_SURVEY
        return await self._save(
            project_id, survey, flags, source,
            lambda s, data, now: (sql, (project_id, s.id, s.name, s.archived, data, now)),
            Conflict("name", "There is already a survey with this name."),
            Conflict("id", "the survey was deleted meanwhile"),
        )  # fmt: skip

    async def delete_survey(
        self, project_id: int, survey_id: str, flags: list[FlagWrite], *,
        source: ChangeSource | None = None,
    ) -> None:  # fmt: skip
        """Delete the survey and its aggregate, and write ``flags``, in one transaction."""
        survey = ("DELETE FROM surveys WHERE project_id = $1 AND id = $2", (project_id, survey_id))
        counts = (_DELETE_AGGREGATE, (project_id, survey_id))
        await self._delete(project_id, flags, source, survey, counts)

    async def survey_aggregates(
        self, project_id: int, survey_ids: list[str] | None
    ) -> dict[str, stats.SurveyStats]:
        """The counted survey events per survey (None: every survey of the project)."""
        if survey_ids is None:
            rows = await self.sql.fetch(
                "SELECT a.survey_id, a.state FROM survey_aggregates a JOIN surveys s "
                "ON s.id = a.survey_id WHERE a.project_id = $1",
                project_id,
            )
        else:
            rows = await self.sql.fetch(
                "SELECT survey_id, state FROM survey_aggregates "
                "WHERE project_id = $1 AND survey_id = ANY($2::text[])",
                project_id,
                survey_ids,
            )
        return {r[0]: stats.decode(bytes(r[1])) for r in rows}

    # early access features ----------------------------------------------------------------

    async def list_early_access_features(self, project_id: int, limit: int, offset: int) -> Page:
        """Features, newest first (``results`` are :class:`EarlyAccessFeature`)."""
        return await page(
            self.sql, "early_access_features WHERE project_id = $1", "data::text",
            "created_at DESC, id", (project_id,), limit, offset, lambda r: _feature(r[0]),
        )  # fmt: skip

    async def get_early_access_feature(
        self, project_id: int, feature_id: str
    ) -> EarlyAccessFeature | None:
        row = await by_id(self.sql, "early_access_features", "data::text", project_id, feature_id)
        return _feature(row[0]) if row is not None else None

    async def early_access_feature_of_flag(self, project_id: int, flag_id: int) -> str | None:
        """The id of the feature linked to flag ``flag_id``, if any."""
        found: str | None = await self.sql.fetchval(
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
        def statement(f: EarlyAccessFeature, data: str, now: str) -> tuple[str, tuple[Any, ...]]:
            if create:
                return _INSERT_FEATURE, (f.id, project_id, f.feature_flag_id, data, now)
            return _UPDATE_FEATURE, (project_id, f.id, data)

        taken = Conflict("feature_flag_id", "This flag already has a feature attached to it.")
        return await self._save(project_id, feature, flags, source, statement, taken, None)

    async def delete_early_access_feature(
        self, project_id: int, feature_id: str, flags: list[FlagWrite], *,
        source: ChangeSource | None = None,
    ) -> None:  # fmt: skip
        sql = "DELETE FROM early_access_features WHERE project_id = $1 AND id = $2"
        await self._delete(project_id, flags, source, (sql, (project_id, feature_id)))

    async def _save(
        self,
        project_id: int,
        item: T,
        flags: list[FlagWrite],
        source: ChangeSource | None,
        statement: Callable[[T, str, str], tuple[str, tuple[Any, ...]]],
        taken: Conflict,
        gone: Conflict | None,
    ) -> T:
        """Write the flags ``item`` keeps, then its row (``statement`` of the saved item, its
        JSON and the time), in one transaction; ``taken`` on a unique violation, ``gone`` when
        an update found no row."""
        now = now_iso()

        async def write(tx: Tx) -> T:
            created = await apply_flag_writes(tx, project_id, flags, now, source)
            saved = msgspec.structs.replace(item, **created) if created else item
            sql, args = statement(saved, _encode(saved).decode(), now)
            try:
                row = await tx.fetchrow_guarded(sql, *args)
            except UniqueViolation:
                raise taken from None
            if row is None and gone is not None:
                raise gone
            await tx.bump_definitions(project_id)
            return saved

        return await self.sql.write(write)

    async def _delete(
        self,
        project_id: int,
        flags: list[FlagWrite],
        source: ChangeSource | None,
        *statements: tuple[str, tuple[Any, ...]],
    ) -> None:
        """Write the flags a deleted item leaves behind, then run ``statements``, together."""
        now = now_iso()

        async def write(tx: Tx) -> None:
            await apply_flag_writes(tx, project_id, flags, now, source)
            for sql, args in statements:
                await tx.execute(sql, *args)
            await tx.bump_definitions(project_id)

        await self.sql.write(write)

    async def surveys_snapshot(self, project_id: int) -> SurveysSnapshot:
        async def read(db: Reader) -> SurveysSnapshot:
            surveys = [
                _survey(r[0])
                for r in await db.fetch(
                    "SELECT data::text FROM surveys WHERE project_id = $1 AND NOT archived "
                    "ORDER BY created_at, id",
                    project_id,
                )
            ]
            features = [
                _feature(r[0])
                for r in await db.fetch(
                    "SELECT data::text FROM early_access_features WHERE project_id = $1 "
                    "ORDER BY created_at, id",
                    project_id,
                )
            ]
            responses = {
                r[0]: r[1]
                for r in await db.fetch(
                    "SELECT survey_id, responses FROM survey_aggregates WHERE project_id = $1",
                    project_id,
                )
            }
            ids = _flag_ids(surveys, features)
            rows = await db.fetch(_FLAG_KEYS, project_id, ids) if ids else []
            keys: dict[int, str] = {r[0]: r[1] for r in rows}
            return SurveysSnapshot(surveys, features, keys, responses)

        return await self.sql.snapshot(read)
