from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server import PERSONAL_KEY, PROJECT_TOKEN, Api, Server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the read-mostly API tests; tests use unique keys and distinct ids."""
    root = tmp_path_factory.mktemp("server")
    srv = Server(data_dir=root / "data").start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Server]:
    """A server of the test's own, on an empty data dir."""
    srv = Server(data_dir=tmp_path / "data").start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def api(server: Server) -> Api:
    return Api(server.url)


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="session")
def token() -> str:
    return PROJECT_TOKEN


@pytest.fixture(scope="session")
def personal_key() -> str:
    return PERSONAL_KEY


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After a passing run pytest removes its numbered temporary folder (the retention policy
    in pyproject.toml); this removes the per-user folder above it too when nothing else (another
    session, a failed run kept for inspection) is in it."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    if exitstatus == 0 and basetemp is not None and not basetemp.exists():
        with contextlib.suppress(OSError):
            os.rmdir(basetemp.parent)
