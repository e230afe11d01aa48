"""Caches follow the node's change counter: a bump makes the very next request re-check."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from flagstaff.server.caches import DefinitionsCache, ProjectCache
from flagstaff.store.base import Definitions, Project
from flagstaff.store.changes import ChangeCounter


def _flag(version: int) -> dict[str, Any]:
    return {
        "id": 1,
        "key": "checkout",
        "name": "",
        "active": True,
        "deleted": False,
        "version": version,
        "filters": {"groups": [{"properties": [], "rollout_percentage": 10 * version}]},
    }


class _Store:
    def __init__(self) -> None:
        self.version = 1
        self.reads = 0
        self.checks = 0
        self.fail = False
        self.gate: asyncio.Event | None = None
        self.projects: dict[str, Project] = {}
        self.project_reads = 0

    async def definitions_version(self, project_id: int) -> int:
        self.checks += 1
        if self.fail:
            raise OSError("the database is gone")
        return self.version

    async def definitions(self, project_id: int) -> Definitions:
        self.reads += 1
        if self.fail:
            raise OSError("the database is gone")
        version = self.version
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)
        return Definitions(
            version=version, flags=[_flag(version)], cohorts={}, group_type_mapping={}
        )

    async def get_project_by_token(self, token: str) -> Project | None:
        self.project_reads += 1
        return self.projects.get(token)


@pytest.fixture
def counter(tmp_path: Path) -> ChangeCounter:
    return ChangeCounter(tmp_path)


def test_the_counter_is_shared_through_its_file(tmp_path: Path) -> None:
    a, b = ChangeCounter(tmp_path), ChangeCounter(tmp_path)
    assert a.value() == b.value() == 0
    assert a.bump() == 1 and b.value() == 1 and b.cell.value == 1
    assert b.bump() == 2 and a.value() == 2
    a.close()
    with pytest.raises(RuntimeError):
        a.bump()
    c = ChangeCounter(tmp_path)
    assert c.value() == 2 and c.bump() == 3
    assert b.value() == 3
    b.close()
    c.close()


def test_a_bump_makes_the_next_request_load_the_new_version(counter: ChangeCounter) -> None:
    async def scenario() -> None:
        store = _Store()
        cache = DefinitionsCache(store, 3600, counter)  # type: ignore[arg-type]
        first = await cache.get(1)
        assert first.definitions.version == 1 and first.compiled.flag("checkout") is not None
        store.version = 2
        assert await cache.get(1) is first and store.checks == 0  # nobody said anything changed
        counter.bump()
        second = await cache.get(1)
        assert second.definitions.version == 2 and store.checks == 1 and store.reads == 2
        assert second.etag != first.etag
        assert await cache.get(1) is second and store.checks == 1

        counter.bump()  # a change elsewhere: one version read, no reload
        assert await cache.get(1) is second and store.checks == 2 and store.reads == 2

    asyncio.run(scenario())


def test_concurrent_requests_wait_for_one_compile_and_none_answers_stale(
    counter: ChangeCounter,
) -> None:
    async def scenario() -> None:
        store = _Store()
        cache = DefinitionsCache(store, 3600, counter)  # type: ignore[arg-type]
        await cache.get(1)
        store.version = 2
        store.gate = asyncio.Event()
        counter.bump()
        waiting = [asyncio.create_task(cache.get(1)) for _ in range(5)]
        await asyncio.sleep(0.01)
        assert not any(t.done() for t in waiting)  # they wait; none got version 1
        store.gate.set()
        answers = await asyncio.gather(*waiting)
        assert {a.definitions.version for a in answers} == {2}
        assert all(a is answers[0] for a in answers) and store.reads == 2

    asyncio.run(scenario())


def test_a_change_during_a_load_is_not_lost(counter: ChangeCounter) -> None:
    """A request that starts after a bump never takes the result of a load begun before it."""

    async def scenario() -> None:
        store = _Store()
        cache = DefinitionsCache(store, 3600, counter)  # type: ignore[arg-type]
        await cache.get(1)
        store.version = 2
        store.gate = asyncio.Event()
        counter.bump()
        early = asyncio.create_task(cache.get(1))
        await asyncio.sleep(0.01)  # its load has read version 2 and waits
        store.version = 3
        counter.bump()
        late = asyncio.create_task(cache.get(1))
        await asyncio.sleep(0.01)
        store.gate.set()
        assert (await early).definitions.version in (2, 3)
        assert (await late).definitions.version == 3

    asyncio.run(scenario())


def test_the_periodic_check_bounds_an_unsignalled_change(counter: ChangeCounter) -> None:
    async def scenario() -> None:
        store = _Store()
        cache = DefinitionsCache(store, 0.05, counter)  # type: ignore[arg-type]
        first = await cache.get(1)
        store.version = 2
        await asyncio.sleep(0.06)
        assert (await cache.get(1)).definitions.version == 2  # no bump: the poll found it
        assert first.definitions.version == 1

    asyncio.run(scenario())


def test_a_failed_check_keeps_serving_and_retries(counter: ChangeCounter) -> None:
    async def scenario() -> None:
        store = _Store()
        cache = DefinitionsCache(store, 3600, counter)  # type: ignore[arg-type]
        first = await cache.get(1)
        store.fail = True
        counter.bump()
        assert await cache.get(1) is first and store.checks == 1
        store.fail = False
        store.version = 2
        counter.bump()
        assert (await cache.get(1)).definitions.version == 2

        store.fail = True
        with pytest.raises(OSError):
            await DefinitionsCache(store, 3600, counter).get(5)  # type: ignore[arg-type]
        store.fail = False

    asyncio.run(scenario())


def test_projects_by_token_follow_the_counter(counter: ChangeCounter) -> None:
    async def scenario() -> None:
        store = _Store()
        cache = ProjectCache(store, counter)  # type: ignore[arg-type]
        project = Project(1, "u", "p", "phc_a", "2026-01-01T00:00:00Z")
        assert await cache.by_token("phc_a") is None
        store.projects["phc_a"] = project
        assert await cache.by_token("phc_a") is None  # remembered as unknown for a second
        counter.bump()  # ... unless something changed
        assert await cache.by_token("phc_a") == project
        reads = store.project_reads
        assert await cache.by_token("phc_a") == project and store.project_reads == reads
        del store.projects["phc_a"]
        counter.bump()
        assert await cache.by_token("phc_a") is None

    asyncio.run(scenario())
