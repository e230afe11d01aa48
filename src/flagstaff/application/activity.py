"""The activity log as the API and the console read it: a flag's history (paged by number)
and the project's log (cursor paginated, newest first). The records are written by the store
with each change (``activity/``). The use cases return records; the adapters render them
(``activity/api.py``)."""

from __future__ import annotations

from typing import Protocol

import msgspec

from flagstaff.activity.records import Scope, StoredActivity
from flagstaff.application.context import Caller
from flagstaff.flags.records import FeatureFlag


class ActivityStore(Protocol):
    """What the activity listings read."""

    async def list_activity(
        self, project_id: int, *, scope: Scope | None = None, item_id: str | None = None,
        user_id: int | None = None, before_id: int | None = None, limit: int = 100,
        offset: int = 0,
    ) -> list[StoredActivity]: ...  # fmt: skip

    async def count_activity(self, project_id: int, scope: Scope, item_id: str | None) -> int: ...


async def flag_history(
    store: ActivityStore, project_id: int, flag_id: int, limit: int, offset: int = 0
) -> list[StoredActivity]:
    """The flag's activity records (scope FeatureFlag, item the flag's id), newest first: the
    API's activity page and the console's history page."""
    return await store.list_activity(
        project_id, scope=Scope.FEATURE_FLAG, item_id=str(flag_id), limit=limit, offset=offset
    )


class FlagActivity(msgspec.Struct, frozen=True):
    """One page of a flag's history, newest first, and how many records it has in all."""

    records: list[StoredActivity]
    total: int


class ActivityLog(msgspec.Struct, frozen=True):
    """One page of the project's activity log, newest first, and the cursor of the next page
    (the last record's id; None: this is the last page)."""

    records: list[StoredActivity]
    cursor: int | None


async def flag_activity(
    caller: Caller[ActivityStore], flag: FeatureFlag, limit: int, page: int
) -> FlagActivity:
    """One page (from 1) of the flag's history, newest first, and how many records it has."""
    total = await caller.store.count_activity(caller.project_id, Scope.FEATURE_FLAG, str(flag.id))
    rows = await flag_history(caller.store, caller.project_id, flag.id, limit, (page - 1) * limit)
    return FlagActivity(rows, total)


async def activity_log(
    caller: Caller[ActivityStore],
    *,
    scope: Scope | None,
    item_id: str | None,
    user_id: int | None,
    before_id: int | None,
    limit: int,
) -> ActivityLog:
    """The project's activity records older than ``before_id``, newest first, at most
    ``limit``, and the cursor of the next page (None: this is the last)."""
    rows = await caller.store.list_activity(
        caller.project_id,
        scope=scope,
        item_id=item_id,
        user_id=user_id,
        before_id=before_id,
        limit=limit + 1,
    )
    if len(rows) > limit:
        rows = rows[:limit]
        return ActivityLog(rows, rows[-1].id)
    return ActivityLog(rows, None)
