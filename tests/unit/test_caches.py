"""Compiled definitions: a new version compiles beside the requests, which keep the old one."""

from __future__ import annotations

import asyncio
from typing import Any

from flagstaff.caches import DefinitionsCache
from flagstaff.store.base import Definitions


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

    async def definitions_version(self, project_id: int) -> int:
        self.checks += 1
        return self.version

    async def definitions(self, project_id: int) -> Definitions:
        self.reads += 1
        await asyncio.sleep(0)
        return Definitions(
            version=self.version, flags=[_flag(self.version)], cohorts={}, group_type_mapping={}
        )


async def _until_version(cache: DefinitionsCache, version: int) -> None:
    for _ in range(500):
        if (await cache.get(1)).definitions.version == version:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"version {version} never served")


def test_a_new_version_is_served_once_compiled_and_the_old_one_meanwhile() -> None:
    async def scenario() -> None:
        store = _Store()
        cache = DefinitionsCache(store, refresh_seconds=0)  # type: ignore[arg-type]
        first = await cache.get(1)
        assert first.definitions.version == 1 and first.compiled.flag("checkout") is not None
        store.version = 2
        assert await cache.get(1) is first  # the change is seen; its compile has just started
        await _until_version(cache, 2)
        assert store.reads == 2

        together = await asyncio.gather(*(cache.get(7) for _ in range(5)))
        assert all(flags is together[0] for flags in together) and store.reads == 3

    asyncio.run(scenario())


def test_invalidate_makes_the_next_request_check_the_version() -> None:
    async def scenario() -> None:
        store = _Store()
        cache = DefinitionsCache(store, refresh_seconds=3600)  # type: ignore[arg-type]
        first = await cache.get(1)
        store.version = 3
        assert await cache.get(1) is first and store.checks == 0
        cache.invalidate(1)
        await _until_version(cache, 3)
        assert store.checks == 1 and store.reads == 2

    asyncio.run(scenario())
