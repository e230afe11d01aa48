"""Persons enrolled in an early access feature: those whose person property
``$feature_enrollment/<flag key>`` is true (posthog-js sets it on opt-in), kept one row per
flag key and person in ``person_enrollments`` by ingestion, and counted per flag key in
``enrollment_counts`` by that table's triggers (migration 0131). A mixin of
:class:`~flagstaff.store.sqlite.store.SQLiteStore`: counts are one row per feature, the
newest enrolled persons a walk of the primary key; never the persons' properties."""

from __future__ import annotations

import sqlite3

from flagstaff.store.records import Enrolled

_CHUNK = 400


class EnrollmentMixin:
    @property
    def db(self) -> sqlite3.Connection:  # provided by SQLiteStore
        raise NotImplementedError

    async def enrolled_persons(self, project_id: int, flag_key: str, limit: int) -> Enrolled:
        args = (project_id, flag_key)
        row = self.db.execute(
            "SELECT persons FROM enrollment_counts WHERE project_id = ? AND flag_key = ?", args
        ).fetchone()
        count = row[0] if row is not None else 0
        rows = self.db.execute(
            "SELECT (SELECT min(d.distinct_id) FROM person_distinct_ids d "
            "WHERE d.project_id = e.project_id AND d.person_id = e.person_id) "
            "FROM person_enrollments e WHERE e.project_id = ? AND e.flag_key = ? "
            "ORDER BY e.person_id DESC LIMIT ?",
            (*args, limit),
        ).fetchall()
        return Enrolled(int(count), [str(r[0]) for r in rows if r[0] is not None])

    async def enrollment_counts(self, project_id: int, flag_keys: list[str]) -> dict[str, int]:
        out = dict.fromkeys(flag_keys, 0)
        keys = sorted(set(flag_keys))
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            for key, count in self.db.execute(
                "SELECT flag_key, persons FROM enrollment_counts WHERE project_id = ? "
                f"AND flag_key IN ({marks})",
                (project_id, *chunk),
            ):
                out[key] = int(count)
        return out
