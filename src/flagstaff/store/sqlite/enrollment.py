"""Persons enrolled in an early access feature: those whose person property
``$feature_enrollment/<flag key>`` is true (posthog-js sets it on opt-in). A mixin of
:class:`~flagstaff.store.sqlite.store.SQLiteStore`. A read scans the project's persons (2 s
for 1M persons on a loaded 2-core VM): there is no index on a property."""

from __future__ import annotations

import json
import sqlite3

from flagstaff.store.records import Enrolled


class EnrollmentMixin:
    @property
    def db(self) -> sqlite3.Connection:  # provided by SQLiteStore
        raise NotImplementedError

    async def enrolled_persons(self, project_id: int, property_key: str, limit: int) -> Enrolled:
        path = "$." + json.dumps(property_key)
        where = (  # the key's text first: a string search is cheaper than parsing each JSON
            "FROM persons p WHERE p.project_id = ? AND instr(p.properties, ?) > 0 "
            "AND json_extract(p.properties, ?) IN (1, 'true') AND json_type(p.properties, ?) "
            "IN ('true', 'text')"
        )
        args = (project_id, json.dumps(property_key), path, path)
        (count,) = self.db.execute(f"SELECT count(*) {where}", args).fetchone()
        rows = self.db.execute(
            "SELECT (SELECT min(d.distinct_id) FROM person_distinct_ids d "
            f"WHERE d.project_id = p.project_id AND d.person_id = p.id) {where} "
            "ORDER BY p.id DESC LIMIT ?",
            (*args, limit),
        ).fetchall()
        return Enrolled(int(count), [str(r[0]) for r in rows if r[0] is not None])
