"""Per-worker caches in front of the store: projects by token, compiled flag definitions, what
posthog-js reads of surveys and early access features.

Both follow the node's change counter (:mod:`flagstaff.store.changes`): a request that finds it
moved since an entry was filled re-reads the store before answering, so a management write
is served by every worker from the next request on. Definitions are recompiled only when the
project's definitions version changed; the version is also re-read at least every
``refresh_seconds``, which bounds how long a change nobody signalled can go unseen.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from datetime import UTC, datetime
from typing import Any

import msgspec

from flagstaff.flags import CompiledFlags, compile_flags
from flagstaff.flags.local_evaluation import local_evaluation_cohorts, local_evaluation_flags
from flagstaff.ops import logs
from flagstaff.store.base import Definitions, Project, Store, SurveysSnapshot
from flagstaff.store.changes import ChangeCounter
from flagstaff.surveys.public import has_active_survey

_NEGATIVE_TTL = 1.0


class ProjectCache:
    """Projects by token. Emptied whenever the node's change counter moves, so a project
    created or changed anywhere is served as it now is on the next request."""

    def __init__(self, store: Store, changes: ChangeCounter) -> None:
        self._store = store
        self._changes = changes.cell
        self._stamp = -1
        self._by_token: dict[str, Project] = {}
        self._unknown: dict[str, float] = {}

    async def by_token(self, token: str) -> Project | None:
        stamp = self._changes.value
        if stamp != self._stamp:
            self._by_token.clear()
            self._unknown.clear()
            self._stamp = stamp
        project = self._by_token.get(token)
        if project is not None:
            return project
        now = time.monotonic()
        missed = self._unknown.get(token)
        if missed is not None and now - missed < _NEGATIVE_TTL:
            return None
        project = await self._store.get_project_by_token(token)
        if self._changes.value != stamp:
            return project  # read while a change landed: answer it, but do not keep it
        if project is None:
            if len(self._unknown) > 10_000:
                self._unknown.clear()
            self._unknown[token] = now
            return None
        self._by_token[token] = project
        return project


class Fragments:
    """Encoded JSON fragments of shared flag results, by the result's id. The results are
    kept alive here, so an id stays unique to its result while its fragment is stored."""

    __slots__ = ("by_id", "owners")

    def __init__(self) -> None:
        self.by_id: dict[int, bytes] = {}
        self.owners: list[Any] = []

    def clear(self) -> None:
        self.by_id.clear()
        self.owners.clear()


class ProjectFlags:
    """One project's definitions at one version, compiled, with what the API serves of them."""

    __slots__ = (
        "compiled",
        "definitions",
        "etag",
        "fragments",
        "group_type_index",
        "local_evaluation_body",
        "ofrep_fragments",
        "stored_data_keys",
    )

    def __init__(self, definitions: Definitions) -> None:
        self.definitions = definitions
        self.compiled: CompiledFlags = compile_flags(
            definitions.flags, definitions.cohorts, definitions.group_type_mapping
        )
        self.group_type_index = {
            name: int(index) for index, name in definitions.group_type_mapping.items()
        }
        self.stored_data_keys = frozenset(
            f["key"] for f in definitions.flags if _reads_properties(f.get("filters") or {})
        )
        self.fragments = Fragments()
        self.ofrep_fragments = Fragments()
        """OFREP answers' items (``http/ofrep.py``), as ``fragments`` are /flags'."""
        self.local_evaluation_body: bytes = msgspec.json.encode(
            {
                "flags": local_evaluation_flags(definitions.flags),
                "group_type_mapping": definitions.group_type_mapping,
                "cohorts": local_evaluation_cohorts(definitions.cohorts),
            }
        )
        """The /flags/definitions answer, built once per version; its digest is the ETag."""
        digest = hashlib.sha1(self.local_evaluation_body).hexdigest()[:20]
        self.etag = f'W/"{digest}"'


def _reads_properties(filters: dict[str, Any]) -> bool:
    """Whether a flag's answer may depend on stored person, group or cohort data."""
    for name in ("groups", "super_groups"):
        for group in filters.get(name) or []:
            if isinstance(group, dict) and group.get("properties"):
                return True
    return False


class _Entry:
    """A project's compiled definitions, the change counter they were checked at, and when
    the store's version must be checked again at the latest (monotonic seconds)."""

    __slots__ = ("due", "flags", "stamp")

    def __init__(self, flags: ProjectFlags, stamp: int, due: float) -> None:
        self.flags = flags
        self.stamp = stamp
        self.due = due


class _Refresh:
    """One in-flight check (and, when the version moved, load and compile) of a project."""

    __slots__ = ("stamp", "started", "task")

    def __init__(self, stamp: int, started: float) -> None:
        self.stamp = stamp
        self.started = started
        self.task: asyncio.Task[ProjectFlags] | None = None


class DefinitionsCache:
    """Compiled definitions per project, never older than the last change this node knows of.

    A request answers from the cache only when the node's change counter still has the value
    the entry was checked at and the entry's periodic check is not due. Otherwise it waits
    for a check of the store's definitions version, and when that moved, for the load and
    compile of the new version (on a thread, so other projects and capture keep running):
    requests of one project share one check. So every request that starts after a write was
    answered on this node (or after this node heard of it) sees it, and a change nobody
    signalled (another node whose NOTIFY was lost) shows within ``refresh_seconds``.

    When a check or compile fails and a version is cached, that version keeps serving, the
    failure is logged and the check is retried ``refresh_seconds`` later.
    """

    def __init__(self, store: Store, refresh_seconds: float, changes: ChangeCounter) -> None:
        self._store = store
        self._refresh = refresh_seconds
        self._changes = changes.cell
        self._entries: dict[int, _Entry] = {}
        self._refreshing: dict[int, _Refresh] = {}

    async def get(self, project_id: int) -> ProjectFlags:
        entry = self._entries.get(project_id)
        if (
            entry is not None
            and entry.stamp == self._changes.value
            and time.monotonic() < entry.due
        ):
            return entry.flags
        return await self._checked(project_id)

    async def _checked(self, project_id: int) -> ProjectFlags:
        stamp = self._changes.value
        now = time.monotonic()
        while True:
            refresh = self._refreshing.get(project_id)
            if refresh is None or refresh.task is None or refresh.task.done():
                refresh = self._start(project_id)
            assert refresh.task is not None
            flags = await asyncio.shield(refresh.task)
            # A check that began before this request's change was known (or too long ago)
            # may have missed it: wait for it, then run another.
            if refresh.stamp >= stamp and refresh.started >= now - self._refresh:
                return flags

    def _start(self, project_id: int) -> _Refresh:
        refresh = _Refresh(self._changes.value, time.monotonic())
        refresh.task = asyncio.create_task(self._run(project_id, refresh))
        self._refreshing[project_id] = refresh
        refresh.task.add_done_callback(lambda _: self._finished(project_id, refresh))
        return refresh

    async def _run(self, project_id: int, refresh: _Refresh) -> ProjectFlags:
        due = refresh.started + self._refresh
        entry = self._entries.get(project_id)
        try:
            if entry is not None:
                version = await self._store.definitions_version(project_id)
                if version == entry.flags.definitions.version:
                    self._entries[project_id] = _Entry(entry.flags, refresh.stamp, due)
                    return entry.flags
            definitions = await self._store.definitions(project_id)
            flags = await asyncio.to_thread(ProjectFlags, definitions)
        except Exception as exc:
            if entry is None:
                raise
            logs.logger.error(
                "checking the flag definitions of project %s failed; serving version %s: %s",
                project_id,
                entry.flags.definitions.version,
                exc,
            )
            self._entries[project_id] = _Entry(entry.flags, refresh.stamp, due)
            return entry.flags
        self._entries[project_id] = _Entry(flags, refresh.stamp, due)
        return flags

    def _finished(self, project_id: int, refresh: _Refresh) -> None:
        if self._refreshing.get(project_id) is refresh:
            del self._refreshing[project_id]
        task = refresh.task
        if task is not None and not task.cancelled() and task.exception() is not None:
            logs.logger.error(
                "loading the flag definitions of project %s failed: %s",
                project_id,
                task.exception(),
            )


class _SurveysEntry(msgspec.Struct):
    snapshot: SurveysSnapshot
    version: int
    stamp: int
    due: float


class SurveysCache:
    """The surveys and early access features posthog-js reads, per project.

    Like :class:`DefinitionsCache`: an entry serves while the node's change counter keeps the
    value it was checked at and its periodic check is not due; then the project's definitions
    version is read, and the snapshot reloaded when it moved. Every survey or feature save
    bumps that version, and so does ingestion when a survey reaches its ``responses_limit``
    (which no management write signals: it shows within ``refresh_seconds``).
    """

    def __init__(self, store: Store, refresh_seconds: float, changes: ChangeCounter) -> None:
        self._store = store
        self._refresh = refresh_seconds
        self._changes = changes.cell
        self._entries: dict[int, _SurveysEntry] = {}

    async def get(self, project_id: int, *, reload: bool = False) -> SurveysSnapshot:
        entry = self._entries.get(project_id)
        now = time.monotonic()
        stamp = self._changes.value
        if entry is not None and not reload and entry.stamp == stamp and now < entry.due:
            return entry.snapshot
        version = await self._store.definitions_version(project_id)
        if entry is not None and not reload and entry.version == version:
            snapshot = entry.snapshot
        else:
            snapshot = await self._store.surveys_snapshot(project_id)
        self._entries[project_id] = _SurveysEntry(snapshot, version, stamp, now + self._refresh)
        return snapshot

    async def any_active(self, project_id: int) -> bool:
        """The remote config's ``surveys``: a survey is active now."""
        snapshot = await self.get(project_id)
        if not snapshot.surveys:
            return False
        return has_active_survey(snapshot.surveys, datetime.now(UTC), snapshot.responses)
