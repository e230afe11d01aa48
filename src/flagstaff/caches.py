"""Per-worker caches in front of the store: projects by token, compiled flag definitions.

Definitions are recompiled only when the project's definitions version changes; the version
is re-read at most every ``refresh_seconds``, so a change made through any worker (or node)
is served everywhere within that interval plus its compile time, with no restart.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from datetime import UTC, datetime
from typing import Any

import msgspec

from flagstaff import logs
from flagstaff.flags import CompiledFlags, compile_flags
from flagstaff.flags.local_evaluation import local_evaluation_cohorts, local_evaluation_flags
from flagstaff.store.base import Definitions, Project, Store, SurveysSnapshot
from flagstaff.surveys.public import has_active_survey

_NEGATIVE_TTL = 1.0


class ProjectCache:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._by_token: dict[str, Project] = {}
        self._unknown: dict[str, float] = {}

    async def by_token(self, token: str) -> Project | None:
        project = self._by_token.get(token)
        if project is not None:
            return project
        now = time.monotonic()
        missed = self._unknown.get(token)
        if missed is not None and now - missed < _NEGATIVE_TTL:
            return None
        project = await self._store.get_project_by_token(token)
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


class DefinitionsCache:
    """Compiled definitions per project.

    A new version is compiled on a thread while requests keep the previous one, so a big
    flag set (hundreds of milliseconds to compile) does not stall the worker's event loop; only
    a project seen for the first time waits for its compile.
    """

    def __init__(self, store: Store, refresh_seconds: float) -> None:
        self._store = store
        self._refresh = refresh_seconds
        self._entries: dict[int, tuple[float, ProjectFlags]] = {}
        self._compiling: dict[int, asyncio.Task[ProjectFlags]] = {}

    async def get(self, project_id: int) -> ProjectFlags:
        entry = self._entries.get(project_id)
        now = time.monotonic()
        if entry is None:
            return await asyncio.shield(self._compile(project_id))
        checked, flags = entry
        if now - checked < self._refresh or project_id in self._compiling:
            return flags
        self._entries[project_id] = (now, flags)
        version = await self._store.definitions_version(project_id)
        if version != flags.definitions.version:
            self._compile(project_id)
        return flags

    def _compile(self, project_id: int) -> asyncio.Task[ProjectFlags]:
        task = self._compiling.get(project_id)
        if task is None:
            task = asyncio.create_task(self._load(project_id))
            self._compiling[project_id] = task
            task.add_done_callback(lambda done: self._compiled(project_id, done))
        return task

    async def _load(self, project_id: int) -> ProjectFlags:
        definitions = await self._store.definitions(project_id)
        flags = await asyncio.to_thread(ProjectFlags, definitions)
        self._entries[project_id] = (time.monotonic(), flags)
        return flags

    def _compiled(self, project_id: int, task: asyncio.Task[ProjectFlags]) -> None:
        if self._compiling.get(project_id) is task:
            del self._compiling[project_id]
        if not task.cancelled() and task.exception() is not None:
            logs.logger.error(
                "compiling the flag definitions of project %s failed: %s",
                project_id,
                task.exception(),
            )

    def invalidate(self, project_id: int | None) -> None:
        """Re-check one project's definitions (None: all) on the next request, e.g. on a
        change pushed by the store; until the new version is compiled, the old one serves."""
        targets = list(self._entries) if project_id is None else [project_id]
        for pid in targets:
            entry = self._entries.get(pid)
            if entry is not None:
                self._entries[pid] = (-math.inf, entry[1])


class SurveysCache:
    """What the public survey and early access lists serve, per project.

    Follows the project's definitions version as :class:`DefinitionsCache` does (every survey
    or feature save, and a survey reaching its ``responses_limit``, bumps it): re-read at most
    every ``refresh_seconds``, at once after ``invalidate``.
    """

    def __init__(self, store: Store, refresh_seconds: float) -> None:
        self._store = store
        self._refresh = refresh_seconds
        self._entries: dict[int, tuple[float, int, SurveysSnapshot]] = {}

    async def get(self, project_id: int, *, reload: bool = False) -> SurveysSnapshot:
        entry = self._entries.get(project_id)
        now = time.monotonic()
        if entry is not None and not reload and now - entry[0] < self._refresh:
            return entry[2]
        version = await self._store.definitions_version(project_id)
        if entry is not None and not reload and entry[1] == version:
            self._entries[project_id] = (now, version, entry[2])
            return entry[2]
        snapshot = await self._store.surveys_snapshot(project_id)
        self._entries[project_id] = (now, version, snapshot)
        return snapshot

    async def any_active(self, project_id: int) -> bool:
        """The remote config's ``surveys``: a survey is active now."""
        snapshot = await self.get(project_id)
        if not snapshot.surveys:
            return False
        return has_active_survey(snapshot.surveys, datetime.now(UTC), snapshot.responses)

    def invalidate(self, project_id: int | None) -> None:
        targets = list(self._entries) if project_id is None else [project_id]
        for pid in targets:
            entry = self._entries.get(pid)
            if entry is not None:
                self._entries[pid] = (-math.inf, entry[1], entry[2])
