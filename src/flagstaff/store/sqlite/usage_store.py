"""The :class:`~flagstaff.store.base.Store` methods of ``SQLiteStore`` for flag usage and
property value suggestions."""

from __future__ import annotations

import sqlite3
from collections import Counter
from typing import TYPE_CHECKING

import msgspec

from flagstaff.store.flag_usage import DailyChecks, ValueChecks
from flagstaff.store.property_values import SAMPLE_ROWS, ValueCount, plain_key, value_counts
from flagstaff.store.sqlite import flag_usage
from flagstaff.store.sqlite.writer import Writer

_encode = msgspec.json.encode
_decode = msgspec.json.decode


class UsageMixin:
    _writer: Writer

    if TYPE_CHECKING:  # the store's read connection, a property of SQLiteStore

        @property
        def db(self) -> sqlite3.Connection: ...

    async def flag_daily_checks(
        self, project_id: int, since_day: int, keys: list[str]
    ) -> list[DailyChecks]:
        return flag_usage.daily_checks(self.db, project_id, since_day, keys)

    async def flag_value_checks(
        self, project_id: int, flag_key: str, since_day: int
    ) -> list[ValueChecks]:
        return flag_usage.value_checks(self.db, project_id, flag_key, since_day)

    async def flag_last_seen(self, project_id: int, keys: list[str]) -> dict[str, int]:
        return flag_usage.last_seen(self.db, project_id, keys)

    async def recompute_flag_usage(self, project_id: int) -> int:
        return await self._writer.submit(lambda conn: flag_usage.recompute(conn, project_id))

    async def property_values(
        self, project_id: int, key: str, group_type_index: int | None
    ) -> list[ValueCount]:
        sample: tuple[str, tuple[int, ...]]
        if group_type_index is None:
            sample = (
                "SELECT properties FROM persons WHERE project_id = ? ORDER BY id DESC LIMIT ?",
                (project_id, SAMPLE_ROWS),
            )
        else:
            sample = (
                "SELECT properties FROM groups WHERE project_id = ? AND group_type_index = ? "
                "LIMIT ?",
                (project_id, group_type_index, SAMPLE_ROWS),
            )
        query, params = sample
        if plain_key(key):
            rows = self.db.execute(
                f"SELECT v, count(*) FROM (SELECT properties -> ? AS v FROM ({query})) "
                "WHERE v IS NOT NULL GROUP BY v",
                (f'$."{key}"', *params),
            ).fetchall()
            return value_counts(rows)
        seen: Counter[bytes] = Counter()
        for (properties,) in self.db.execute(query, params):
            props = _decode(properties)
            if isinstance(props, dict) and key in props:
                seen[_encode(props[key])] += 1
        return value_counts(seen.items())
