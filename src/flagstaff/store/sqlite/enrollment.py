"""Persons enrolled in an early access feature: those whose person property
``$feature_enrollment/<flag key>`` is true (posthog-js sets it on opt-in). A mixin of
:class:`~flagstaff.store.sqlite.store.SQLiteStore`; reads scan the project's persons."""

from __future__ import annotations

import json
import sqlite3

from flagstaff.store.base import Enrolled


class EnrollmentMixin:
    @property
    def db(self) -> sqlite3.Connection:  # provided by SQLiteStore
        raise NotImplementedError

    async def enrolled_persons(self, project_id: int, property_key: str, limit: int) -> Enrolled:
        path = "$." + json.dumps(property_key)
        where = (
            "FROM persons p WHERE p.project_id = ? "
            "AND json_extract(p.properties, ?) IN (1, 'true') AND json_type(p.properties, ?) "
            "IN ('true', 'text')"
        )
        args = (project_id, path, path)
        (count,) = self.db.execute(f"SELECT count(*) {where}", args).fetchone()
        rows = self.db.execute(
            "SELECT (SELECT min(d.distinct_id) FROM person_distinct_ids d "
            f"WHERE d.project_id = p.project_id AND d.person_id = p.id) {where} "
            "ORDER BY p.id DESC LIMIT ?",
            (*args, limit),
        ).fetchall()
        return Enrolled(int(count), [str(r[0]) for r in rows if r[0] is not None])
