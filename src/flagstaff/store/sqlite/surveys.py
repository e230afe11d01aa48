"""Surveys, early access features and survey aggregates on SQLite (mixed into the store).

A save writes the flags it maintains, then its own row, in one writer transaction; every
save bumps the project's definitions version, which the per-worker survey cache follows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

import msgspec

from flagstaff.activity.records import ChangeSource
from flagstaff.store.base import Conflict, FlagWrite, Page, SurveysSnapshot
from flagstaff.store.rows import now_iso
from flagstaff.store.sqlite.flag_writes import bump_definitions, write_flag
from flagstaff.store.sqlite.writer import Writer
from flagstaff.surveys import stats
from flagstaff.surveys.early_access import EarlyAccessFeature
from flagstaff.surveys.model import Survey

_encode = msgspec.json.encode


def _survey(data: str | bytes) -> Survey:
    return msgspec.json.decode(data, type=Survey)


def _feature(data: str | bytes) -> EarlyAccessFeature:
    return msgspec.json.decode(data, type=EarlyAccessFeature)


def apply_flag_writes(
    conn: sqlite3.Connection,
    project_id: int,
    writes: Iterable[FlagWrite],
    now: str,
    source: ChangeSource | None,
) -> dict[str, int]:
    """Write (and log) each flag; returns the ids of created flags by their ``target`` field."""
    created: dict[str, int] = {}
    for w in writes:
        flag_id = write_flag(conn, project_id, w.data, now, source, w.flag_id)
        if w.flag_id is None and w.target is not None:
            created[w.target] = flag_id
    return created


class SurveyMethods:
    """The survey and early access part of :class:`~flagstaff.store.sqlite.store.SQLiteStore`."""

    _writer: Writer
    db: sqlite3.Connection  # the store's read connection

    # surveys ------------------------------------------------------------------------------

    async def list_surveys(self, project_id: int, limit: int, offset: int) -> Page:
        count = self.db.execute(
            "SELECT COUNT(*) FROM surveys WHERE project_id = ?", (project_id,)
        ).fetchone()[0]
        rows = self.db.execute(
            "SELECT data FROM surveys WHERE project_id = ? ORDER BY created_at DESC, id "
            "LIMIT ? OFFSET ?",
            (project_id, limit, offset),
        ).fetchall()
        return Page(count, [_survey(r[0]) for r in rows])

    async def get_survey(self, project_id: int, survey_id: str) -> Survey | None:
        row = self.db.execute(
            "SELECT data FROM surveys WHERE project_id = ? AND id = ?", (project_id, survey_id)
        ).fetchone()
        return _survey(row[0]) if row else None

    async def survey_names(self, project_id: int) -> set[str]:
        rows = self.db.execute("SELECT name FROM surveys WHERE project_id = ?", (project_id,))
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

        def write(conn: sqlite3.Connection) -> Survey:
            created = apply_flag_writes(conn, project_id, flags, now, source)
            saved = msgspec.structs.replace(survey, **created) if created else survey
            row = (
                saved.name,
                int(saved.archived),
                _encode(saved).decode(),
                now,
                project_id,
                saved.id,
            )
            try:
                if create:
                    conn.execute(
                        "INSERT INTO surveys (name, archived, data, created_at, updated_at, "
                        "project_id, id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (*row[:3], now, *row[3:]),
                    )
                else:
                    cur = conn.execute(
                        "UPDATE surveys SET name = ?, archived = ?, data = ?, updated_at = ? "
                        "WHERE project_id = ? AND id = ?",
                        row,
                    )
                    if cur.rowcount == 0:
                        raise Conflict("id", "the survey was deleted meanwhile")
            except sqlite3.IntegrityError:
                raise Conflict("name", "There is already a survey with this name.") from None
            bump_definitions(conn, project_id)
            return saved

        return await self._writer.submit(write)

    async def delete_survey(
        self,
        project_id: int,
        survey_id: str,
        flags: list[FlagWrite],
        *,
        source: ChangeSource | None = None,
    ) -> None:
        now = now_iso()

        def write(conn: sqlite3.Connection) -> None:
            apply_flag_writes(conn, project_id, flags, now, source)
            conn.execute(
                "DELETE FROM surveys WHERE project_id = ? AND id = ?", (project_id, survey_id)
            )
            conn.execute(
                "DELETE FROM survey_aggregates WHERE project_id = ? AND survey_id = ?",
                (project_id, survey_id),
            )
            bump_definitions(conn, project_id)

        await self._writer.submit(write)

    async def survey_aggregates(
        self, project_id: int, survey_ids: list[str] | None
    ) -> dict[str, stats.SurveyStats]:
        if survey_ids is None:
            rows = self.db.execute(
                "SELECT a.survey_id, a.state FROM survey_aggregates a JOIN surveys s "
                "ON s.id = a.survey_id WHERE a.project_id = ?",
                (project_id,),
            ).fetchall()
        else:
            marks = ",".join("?" * len(survey_ids))
            rows = self.db.execute(
                "SELECT survey_id, state FROM survey_aggregates "
                f"WHERE project_id = ? AND survey_id IN ({marks})",
                (project_id, *survey_ids),
            ).fetchall()
        return {r[0]: stats.decode(r[1]) for r in rows}

    # early access features ----------------------------------------------------------------

    async def list_early_access_features(self, project_id: int, limit: int, offset: int) -> Page:
        count = self.db.execute(
            "SELECT COUNT(*) FROM early_access_features WHERE project_id = ?", (project_id,)
        ).fetchone()[0]
        rows = self.db.execute(
            "SELECT data FROM early_access_features WHERE project_id = ? "
            "ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            (project_id, limit, offset),
        ).fetchall()
        return Page(count, [_feature(r[0]) for r in rows])

    async def get_early_access_feature(
        self, project_id: int, feature_id: str
    ) -> EarlyAccessFeature | None:
        row = self.db.execute(
            "SELECT data FROM early_access_features WHERE project_id = ? AND id = ?",
            (project_id, feature_id),
        ).fetchone()
        return _feature(row[0]) if row else None

    async def early_access_feature_of_flag(self, project_id: int, flag_id: int) -> str | None:
        row = self.db.execute(
            "SELECT id FROM early_access_features WHERE project_id = ? AND feature_flag_id = ?",
            (project_id, flag_id),
        ).fetchone()
        return row[0] if row else None

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

        def write(conn: sqlite3.Connection) -> EarlyAccessFeature:
            created = apply_flag_writes(conn, project_id, flags, now, source)
            saved = msgspec.structs.replace(feature, **created) if created else feature
            data = _encode(saved).decode()
            try:
                if create:
                    conn.execute(
                        "INSERT INTO early_access_features (id, project_id, feature_flag_id, "
                        "data, created_at) VALUES (?, ?, ?, ?, ?)",
                        (saved.id, project_id, saved.feature_flag_id, data, now),
                    )
                else:
                    conn.execute(
                        "UPDATE early_access_features SET data = ? WHERE project_id = ? AND id = ?",
                        (data, project_id, saved.id),
                    )
            except sqlite3.IntegrityError:
                raise Conflict(
                    "feature_flag_id", "This flag already has a feature attached to it."
                ) from None
            bump_definitions(conn, project_id)
            return saved

        return await self._writer.submit(write)

    async def delete_early_access_feature(
        self,
        project_id: int,
        feature_id: str,
        flags: list[FlagWrite],
        *,
        source: ChangeSource | None = None,
    ) -> None:
        now = now_iso()

        def write(conn: sqlite3.Connection) -> None:
            apply_flag_writes(conn, project_id, flags, now, source)
            conn.execute(
                "DELETE FROM early_access_features WHERE project_id = ? AND id = ?",
                (project_id, feature_id),
            )
            bump_definitions(conn, project_id)

        await self._writer.submit(write)

    async def surveys_snapshot(self, project_id: int) -> SurveysSnapshot:
        db = self.db
        db.execute("BEGIN")
        try:
            surveys = [
                _survey(r[0])
                for r in db.execute(
                    "SELECT data FROM surveys WHERE project_id = ? AND archived = 0 "
                    "ORDER BY created_at, id",
                    (project_id,),
                )
            ]
            features = [
                _feature(r[0])
                for r in db.execute(
                    "SELECT data FROM early_access_features WHERE project_id = ? "
                    "ORDER BY created_at, id",
                    (project_id,),
                )
            ]
            responses = dict(
                db.execute(
                    "SELECT survey_id, responses FROM survey_aggregates WHERE project_id = ?",
                    (project_id,),
                ).fetchall()
            )
            ids = _flag_ids(surveys, features)
            keys: dict[int, str] = {}
            if ids:
                marks = ",".join("?" * len(ids))
                keys = dict(
                    db.execute(
                        f"SELECT id, key FROM feature_flags WHERE project_id = ? AND deleted = 0 "
                        f"AND id IN ({marks})",
                        (project_id, *ids),
                    ).fetchall()
                )
        finally:
            db.execute("COMMIT")
        return SurveysSnapshot(surveys, features, keys, responses)


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
